"""What a certificate says, for tests that check what `schedd certs` issued."""

from __future__ import annotations

from cryptography import x509

from schedd.security.certs import principal_of_uris


def principal_of_cert(cert: x509.Certificate) -> str | None:
    """The principal a leaf certificate names: its single schedd URI SAN, else None (the rule
    the daemon applies to a peer's URIs, `principal_of_uris`)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    return principal_of_uris(san.get_values_for_type(x509.UniformResourceIdentifier))
