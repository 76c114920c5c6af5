"""What a hostile or careless client can do, one test per item (see docs/security.md)."""
