"""cert-manager's ``cert-manager.io/v1`` Issuer and Certificate as JSON Schemas, for the
manifests of ``deploy/cert-manager/``: kubernetes-validate ships the core API's schemas
only, and a CRD's are not on this machine (no network). Written from cert-manager's API
reference: every field of ``spec`` is listed, so a misspelt one is refused (strict, as the
core check is); the nested objects the manifests use are strict too, the others are
open objects."""

from __future__ import annotations

from typing import Any

_OBJ: dict[str, Any] = {"type": "object"}
_STRINGS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
_DURATION: dict[str, Any] = {
    "type": "string",
    "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$",
}
_KEY_USAGES = [
    "signing", "digital signature", "content commitment", "key encipherment",
    "key agreement", "data encipherment", "cert sign", "crl sign", "encipher only",
    "decipher only", "any", "server auth", "client auth", "code signing", "email protection",
    "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping",
    "ocsp signing", "microsoft sgc", "netscape sgc",
]  # fmt: skip

_METADATA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}


def _kind(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "cert-manager.io/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
        "additionalProperties": False,
    }


ISSUER = _kind(
    "Issuer",
    {
        "type": "object",
        "properties": {
            "acme": _OBJ,
            "ca": {
                "type": "object",
                "required": ["secretName"],
                "properties": {
                    "secretName": {"type": "string", "minLength": 1},
                    "crlDistributionPoints": _STRINGS,
                    "issuingCertificateURLs": _STRINGS,
                    "ocspServers": _STRINGS,
                },
                "additionalProperties": False,
            },
            "selfSigned": {
                "type": "object",
                "properties": {"crlDistributionPoints": _STRINGS},
                "additionalProperties": False,
            },
            "vault": _OBJ,
            "venafi": _OBJ,
        },
        "additionalProperties": False,
        "minProperties": 1,
        "maxProperties": 1,  # exactly one kind of issuer
    },
)

CERTIFICATE = _kind(
    "Certificate",
    {
        "type": "object",
        "required": ["secretName", "issuerRef"],
        "properties": {
            "additionalOutputFormats": {"type": "array", "items": _OBJ},
            "commonName": {"type": "string", "maxLength": 64},
            "dnsNames": _STRINGS,
            "duration": _DURATION,
            "emailAddresses": _STRINGS,
            "encodeUsagesInRequest": {"type": "boolean"},
            "ipAddresses": _STRINGS,
            "isCA": {"type": "boolean"},
            "issuerRef": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "kind": {"type": "string"},
                    "group": {"type": "string"},
                },
                "additionalProperties": False,
            },
            "keystores": _OBJ,
            "literalSubject": {"type": "string"},
            "nameConstraints": _OBJ,
            "otherNames": {"type": "array", "items": _OBJ},
            "privateKey": {
                "type": "object",
                "properties": {
                    "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                    "encoding": {"enum": ["PKCS1", "PKCS8"]},
                    "rotationPolicy": {"enum": ["Never", "Always"]},
                    "size": {"type": "integer"},
                },
                "additionalProperties": False,
            },
            "renewBefore": _DURATION,
            "renewBeforePercentage": {"type": "integer"},
            "revisionHistoryLimit": {"type": "integer", "minimum": 1},
            "secretName": {"type": "string", "minLength": 1},
            "secretTemplate": _OBJ,
            "signatureAlgorithm": {"type": "string"},
            "subject": _OBJ,
            "uris": _STRINGS,
            "usages": {"type": "array", "items": {"enum": _KEY_USAGES}},
        },
        "additionalProperties": False,
    },
)

SCHEMAS = {"Issuer": ISSUER, "Certificate": CERTIFICATE}
