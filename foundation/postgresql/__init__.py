"""The PostgreSQL database backend of the product: Django's own, with work run just before commit."""
