"""PostgREST toolboxes (docs/guide-toolboxes.md §2; docs/tools.md §10): tools per table and
method, read from the OpenAPI (Swagger 2.0) document PostgREST serves at its root."""
