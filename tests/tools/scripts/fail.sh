#!/usr/bin/env bash
# Test tool: writes to both streams and exits with the code it is given.
case "$1" in
  describe)
    echo '{"slug": "fail", "description": "Fails on purpose", "args": [
      {"name": "code", "description": "exit code", "type": "number", "backing_type": "string",
       "arity": "single", "mode": "positional"},
      {"name": "quiet", "description": "write nothing to stderr", "type": "boolean",
       "backing_type": "string", "arity": "optional", "mode": "dashdashequal"}]}'
    ;;
  run)
    code="$2"
    echo "partial output"
    if [ "$3" != "--quiet=true" ]; then echo "something went wrong" >&2; fi
    exit "$code"
    ;;
  *) echo "usage: $0 describe|run" >&2; exit 1 ;;
esac
