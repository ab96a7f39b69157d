"""The one check of a CycloneDX document against CycloneDX's own JSON schema, and a reader of its
components.

The schema files are the ones cyclonedx-python-lib ships (strict: no property the spec lacks), with
its registry of the SPDX, JSF and cryptography schemas they reference, as its JsonStrictValidator
builds them. One format check differs: `iri-reference` (every URL in the document). jsonschema
checks it with rfc3987-syntax's Earley parser, about half a second per URL on the CI box (an
image's SBOM holds over a thousand); here an IRI is checked as RFC 3987 maps it to a URI (its
non-ASCII characters percent-encoded) with the RFC 3986 validator jsonschema uses for `uri-reference`.
"""

from __future__ import annotations

import functools
import json
from typing import Any
from urllib.parse import quote

SPEC = "1.6"  # cyclonedx-py's default, what the build writes


def _iri_reference(value: object) -> bool:
    from rfc3986_validator import validate_rfc3986

    if not isinstance(value, str):
        return True  # formats apply to strings only
    as_uri = "".join(c if ord(c) < 128 else quote(c) for c in value)
    return bool(validate_rfc3986(as_uri, rule="URI_reference"))


@functools.cache
def _validator() -> Any:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.schema._res import BOM_JSON_STRICT, CRYPTOGRAPHY_DEFS, JSF, SPDX_JSON
    from jsonschema import Draft7Validator, FormatChecker
    from referencing import Registry
    from referencing.jsonschema import DRAFT7

    def load(path: str) -> Any:
        with open(path) as f:
            return json.load(f)

    prefix = "http://cyclonedx.org/schema/"
    registry: Any = Registry().with_resources(
        [
            (f"{prefix}spdx.SNAPSHOT.schema.json", DRAFT7.create_resource(load(SPDX_JSON))),
            (
                f"{prefix}cryptography-defs.SNAPSHOT.schema.json",
                DRAFT7.create_resource(load(CRYPTOGRAPHY_DEFS)),
            ),
            (f"{prefix}jsf-0.82.SNAPSHOT.schema.json", DRAFT7.create_resource(load(JSF))),
        ]
    )
    formats = FormatChecker()
    formats.checkers["iri-reference"] = (_iri_reference, ValueError)
    schema_file = BOM_JSON_STRICT[SchemaVersion.from_version(SPEC)]
    assert schema_file is not None, f"cyclonedx-python-lib has no strict schema for CycloneDX {SPEC}"
    schema = load(schema_file)
    return Draft7Validator(schema, registry=registry, format_checker=formats)


def schema_errors(document: dict[str, Any]) -> list[str]:
    """Where `document` breaks the CycloneDX schema, one line per error; [] when it is valid."""
    assert document.get("specVersion") == SPEC, document.get("specVersion")
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator().iter_errors(document)]


def components(document: dict[str, Any], purl_type: str) -> dict[str, str]:
    """The components whose package URL is of `purl_type` (pypi, deb): name -> version."""
    return {
        c["name"]: c["version"]
        for c in document["components"]
        if c.get("purl", "").startswith(f"pkg:{purl_type}/")
    }
