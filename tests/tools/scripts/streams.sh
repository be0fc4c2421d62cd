#!/usr/bin/env bash
# Test tool: succeeds, with noise on stderr that must not reach the result.
case "$1" in
  describe) echo '{"slug": "streams", "description": "stdout and stderr", "args": []}' ;;
  run) echo "noise on stderr" >&2; printf 'the result\n'; echo "more noise" >&2 ;;
  *) exit 1 ;;
esac
