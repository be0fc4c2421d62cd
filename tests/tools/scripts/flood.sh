#!/usr/bin/env bash
# Test tool: prints the given number of bytes ("x" repeated) on stdout.
case "$1" in
  describe) echo '{"slug": "flood", "description": "Prints a lot", "args": [
      {"name": "bytes", "description": "how many bytes to print", "type": "number",
       "backing_type": "string", "arity": "single", "mode": "positional"}]}' ;;
  run) head -c "$2" /dev/zero | tr '\0' x ;;
  *) exit 1 ;;
esac
