"""Transport security: the deployment's CA and certificates (certs), gRPC TLS credentials with
reload on SIGHUP and peer principals (tls), and the rule for when plaintext is allowed (startup)."""
