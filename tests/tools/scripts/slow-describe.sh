#!/usr/bin/env bash
# Test tool: describe never answers in time.
case "$1" in
  describe) sleep 30 ;;
  *) exit 1 ;;
esac
