#!/usr/bin/env bash
# Test tool: describe prints something that is not JSON.
case "$1" in
  describe) echo "this is not json" ;;
  *) exit 1 ;;
esac
