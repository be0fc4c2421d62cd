#!/usr/bin/env bash
# Test tool: prints nothing; no empty-result given (DoNothing is the default).
case "$1" in
  describe) echo '{"slug": "empty-nothing", "description": "Prints nothing", "args": []}' ;;
  run) exit 0 ;;
  *) exit 1 ;;
esac
