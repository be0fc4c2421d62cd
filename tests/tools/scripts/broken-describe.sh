#!/usr/bin/env bash
# Test tool: describe fails, so loading must drop this tool only.
case "$1" in
  describe) echo "cannot describe myself" >&2; exit 2 ;;
  *) exit 1 ;;
esac
