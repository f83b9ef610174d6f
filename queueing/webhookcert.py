"""A certificate for the admission webhook: a small CA of its own and a server certificate
for the webhook's Service, so a cluster without cert-manager can run the webhook over
TLS (``python manage.py webhook_cert``; docs/deploy.md). The API server trusts the CA
through the ``caBundle`` of the MutatingWebhookConfiguration.
"""

from __future__ import annotations

import base64
import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class WebhookCert:
    ca_pem: bytes
    cert_pem: bytes  # the server certificate
    key_pem: bytes  # its private key (unencrypted: it lives in a Secret)

    @property
    def ca_bundle(self) -> str:
        """The ``caBundle`` of a webhook clientConfig: the CA, PEM, base64."""
        return base64.b64encode(self.ca_pem).decode()


def service_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use for ``service`` in ``namespace``."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def issue(
    names: list[str], *, ips: list[str] | None = None, days: int = 3650, now: datetime | None = None
) -> WebhookCert:
    """A new CA and a server certificate for ``names`` (DNS) and ``ips``, valid ``days``."""
    if not names and not ips:
        raise ValueError("a certificate needs at least one name or address")
    start = (now or datetime.now(UTC)) - timedelta(minutes=5)  # clocks disagree a little
    end = start + timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "koord-queue webhook CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    alt += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips or []]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (names or ips or [""])[0])])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return WebhookCert(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def tls_secret(name: str, namespace: str, cert: WebhookCert) -> dict[str, object]:
    """A ``kubernetes.io/tls`` Secret holding the server pair and the CA (``ca.crt``, which
    cert-manager's Secrets carry too)."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace},
        "data": {
            "tls.crt": b64(cert.cert_pem),
            "tls.key": b64(cert.key_pem),
            "ca.crt": b64(cert.ca_pem),
        },
    }
