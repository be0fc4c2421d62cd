"""PostgREST toolboxes (README, "HTTP APIs as toolboxes"; docs/tools.md §10): tools per table and
method, read from the OpenAPI (Swagger 2.0) document PostgREST serves at its root."""
