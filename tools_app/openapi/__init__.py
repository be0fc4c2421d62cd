"""HTTP toolboxes (docs/guide-toolboxes.md §2; docs/tools.md §9): OpenAPI and PostgREST.

``config`` reads an ``OpenAPIServer``/``PostgRESTServer`` entry, ``document`` fetches, validates and
dereferences its document, ``calls`` makes the calls (headers, token and secrets applied per
request), ``tools`` turns OpenAPI operations into tools; ``tools_app.postgrest`` does the same for
PostgREST's tables.
"""
