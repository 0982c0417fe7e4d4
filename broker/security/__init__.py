"""Security of client connections: listeners (TLS contexts, SASL settings), the SASL
authenticator, principals, and the one place deciding authorization (``authorizer``)."""
