#!/usr/bin/env bash
# Test tool: prints nothing; empty-result AddMessage supplies the text.
case "$1" in
  describe)
    echo '{"slug": "empty-message", "description": "Prints nothing", "args": [],
           "empty-result": {"tag": "AddMessage", "contents": "--no output--"}}' ;;
  run) exit 0 ;;
  *) exit 1 ;;
esac
