"""The wire contract (issue 36 item 3): every request the client builds, and every answer it
reads, checked against ``/openapi.json`` of the server under test. Routes and methods exist,
query parameters are declared with the bounds the client assumes, the give-back body fits
its schema, the live answers fit theirs and carry as required the fields the client reads,
the error codes the client tells apart are the document's, and the client's own checks
(proof and ULID patterns, tag names) are the document's, and so are the answer headers it
reads (a strict take's `idmint-node` and `idmint-owner`). Nothing here is written down by
hand that the document could say instead."""

import json
import re
import uuid
from typing import Any, Dict, List, Tuple

import pytest

import idmint.errors as errors
from idmint import _core, _wire, limits
from conftest import unique


@pytest.fixture(scope="module")
def document(node) -> Dict[str, Any]:
    """The OpenAPI document of the server under test."""
    status, doc = node.call("GET", "/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3."), doc
    return doc


def operation(document: Dict[str, Any], request: _wire.Request) -> Tuple[str, Dict[str, Any]]:
    """The documented operation a request resolves to: its path template and operation."""
    path = request.path.split("?", 1)[0]
    for template, item in document["paths"].items():
        pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path) and request.method.lower() in item:
            return template, item[request.method.lower()]
    raise AssertionError(f"{request.method} {path}: no such route in /openapi.json")


def resolve(document: Dict[str, Any], schema: Dict[str, Any]) -> Dict[str, Any]:
    """The schema a ``$ref`` names (followed until it names none)."""
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = document["components"]["schemas"][name]
    return schema


def validate(document: Dict[str, Any], schema: Dict[str, Any], value: Any, at: str = "$") -> None:
    """The subset of JSON Schema the document uses, checked strictly: types, required and
    additional properties, items, patterns, bounds, enums, oneOf."""
    schema = resolve(document, schema)
    if "oneOf" in schema:
        matches = 0
        for option in schema["oneOf"]:
            try:
                validate(document, option, value, at)
                matches += 1
            except AssertionError:
                pass
        assert matches == 1, f"{at}: {value!r} matches {matches} of oneOf"
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        python = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
        ok = any(
            (k == "integer" and isinstance(value, int) and not isinstance(value, bool))
            or (k == "number" and isinstance(value, (int, float)) and not isinstance(value, bool))
            or (k in python and isinstance(value, python[k]))
            for k in kinds
        )
        assert ok, f"{at}: {value!r} is not {kinds}"
    if isinstance(value, dict):
        for name in schema.get("required", []):
            assert name in value, f"{at}: {name} missing"
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            extra = set(value) - set(properties)
            assert not extra, f"{at}: undocumented {extra}"
        for name, item in value.items():
            if name in properties:
                validate(document, properties[name], item, f"{at}.{name}")
    if isinstance(value, list):
        assert len(value) <= schema.get("maxItems", len(value)), f"{at}: too many items"
        for n, item in enumerate(value):
            if "items" in schema:
                validate(document, schema["items"], item, f"{at}[{n}]")
    if isinstance(value, str):
        if "pattern" in schema:
            assert re.search(schema["pattern"], value), f"{at}: {value!r} !~ {schema['pattern']}"
        assert len(value) >= schema.get("minLength", 0), f"{at}: too short"
    if isinstance(value, int) and not isinstance(value, bool):
        assert value >= schema.get("minimum", value), f"{at}: {value} below the minimum"
        assert value <= schema.get("maximum", value), f"{at}: {value} above the maximum"
    if "enum" in schema:
        assert value in schema["enum"], f"{at}: {value!r} not in the enum"


def answer_schema(document: Dict[str, Any], op: Dict[str, Any]) -> Dict[str, Any]:
    """The schema of an operation's 200 JSON answer."""
    return op["responses"]["200"]["content"]["application/json"]["schema"]


def requests(tag: str) -> List[_wire.Request]:
    """One of every request the client sends."""
    lease = _wire.Lease(1, 11, "0123456789abcdef")
    return [
        _wire.lease(tag, limits.BATCH_COUNT_MAX),
        _wire.give_back(tag, 5, 11, [lease]),
        _wire.ids(tag, 1),
        _wire.snowflake(2),
        _wire.uuid7(2),
        _wire.ulid(2),
    ]


def test_every_request_the_client_sends_is_a_documented_route_with_its_parameters(document):
    for request in requests("order/v2 订单"):
        template, op = operation(document, request)
        declared = {p["name"]: p for p in op.get("parameters", [])}
        query = request.path.split("?", 1)[1] if "?" in request.path else ""
        for pair in filter(None, query.split("&")):
            name, value = pair.split("=", 1)
            assert name in declared and declared[name]["in"] == "query", f"{template}: ?{name}"
            schema = resolve(document, declared[name]["schema"])
            validate(document, schema, int(value) if schema.get("type") == "integer" else value)
            if name == "count":
                # The client's bounds are the document's: a lease's, a batch's.
                bound = limits.LEASE_COUNT_MAX if template.endswith("/ranges") else limits.BATCH_COUNT_MAX
                assert declared["count"]["schema"]["maximum"] == bound, template
                assert declared["count"]["schema"]["minimum"] == 1
        if request.body is not None:
            body_schema = op["requestBody"]["content"]["application/json"]["schema"]
            validate(document, body_schema, request.body, f"{template} body")
        # The tag travels as one path segment (a percent-encoded `/` included).
        if "{tag}" in template:
            assert "/order%2Fv2%20%E8%AE%A2%E5%8D%95" in request.path, request.path


def test_the_fields_the_client_reads_are_required_and_its_patterns_are_the_documents(document):
    def schema_of(request: _wire.Request) -> Dict[str, Any]:
        return resolve(document, answer_schema(document, operation(document, request)[1]))

    tag = "order"
    ranges = schema_of(_wire.lease(tag, 1))
    assert "ranges" in ranges["required"]
    lease = resolve(document, ranges["properties"]["ranges"]["items"])
    assert {"start", "end", "proof"} <= set(lease["required"])
    assert lease["properties"]["proof"]["pattern"] == _wire._PROOF.pattern
    assert lease["properties"]["end"]["maximum"] == limits.ID_MAX
    assert "returned" in schema_of(_wire.give_back(tag, 1, 2, []))["required"]
    for request in (_wire.ids(tag, 1), _wire.snowflake(1), _wire.uuid7(1), _wire.ulid(1)):
        assert "ids" in schema_of(request)["required"], request.path
    ulids = resolve(document, schema_of(_wire.ulid(1))["properties"]["ids"]["items"])
    assert ulids["pattern"] == _wire._ULID.pattern
    give_back = resolve(
        document,
        operation(document, _wire.give_back(tag, 1, 2, []))[1]["requestBody"]["content"]["application/json"]["schema"],
    )
    assert give_back["properties"]["leases"]["maxItems"] == limits.RETURN_LEASES_MAX


def test_the_error_codes_the_client_tells_apart_are_the_documents(document):
    error = resolve(document, document["components"]["schemas"]["Error"])
    detail = resolve(document, error["properties"]["error"])
    assert {"code", "message"} <= set(detail["required"]) and "error" in error["required"]
    codes = set(detail["properties"]["code"]["enum"])
    named = {"unknown_tag", "tag_exhausted", "strict_tag", "formatted_tag", "unauthorized", "forbidden",
             "bad_tag", "bad_count"}
    named |= errors._REFUSED | (errors._ELSEWHERE - {"too_many_requests"}) | {"too_many_requests"}
    assert named <= codes, f"codes the client names that the document lacks: {named - codes}"
    # The lease route documents the answers the client turns into UnknownTag and ExhaustedTag.
    # (Its 409 does not name strict_tag, which the server answers there: see the report.)
    op = operation(document, _wire.lease("t", 1))[1]
    assert "unknown_tag" in op["responses"]["404"]["description"]
    assert "tag_exhausted" in op["responses"]["409"]["description"]


def test_the_clients_tag_rule_is_the_documents(document):
    rule = resolve(document, document["components"]["schemas"]["TagName"])
    samples = ["order", "user/login", "订单", "a b", "🚀", "order@v2", " lead", "trail ", "x\ny",
               "\u202eevil", "a\u200eb", "a\u061cb", "idmint.key.x", "IDMINT.KEY.x", "idmint.keys",
               "\x7f", "tab\tin", "\u00a0nbsp", "é", "%"]
    for sample in samples:
        documented = re.search(rule["pattern"], sample) is not None
        try:
            _core.checked_tag(sample)
            accepted = True
        except errors.BadTag:
            accepted = False
        if sample[:11].lower() == "idmint.key.":
            documented = False  # the reserved prefix is in the rule's description, not its pattern
        assert accepted == documented, f"{sample!r}: client {accepted}, document {documented}"


def test_live_answers_fit_the_documented_schemas(document, node):
    tag = unique("contract")
    node.create_tag(tag, step=10_000)
    strict = unique("contract-strict")
    node.create_tag(strict, strict=True)
    node.wait_ready()
    for request in requests(tag):
        if request.method == "POST":
            # A real give-back: the lease the ranges route answered, with its proof.
            status, leased = node.call("GET", _wire.lease(tag, 10).path)
            lease = _wire.Lease(**leased["ranges"][0])
            request = _wire.give_back(tag, lease.start + 5, lease.end, [lease])
            status, body = node.call("POST", request.path, request.body)
        else:
            status, body = node.call("GET", request.path)
        assert status == 200, (request.path, body)
        op = operation(document, request)[1]
        validate(document, answer_schema(document, op), body, request.path)
        request.parse(body)  # and the client reads it
    for request, code, status_expected in [
        (_wire.lease(unique("missing"), 1), "unknown_tag", 404),
        (_wire.lease(strict, 1), "strict_tag", 409),
        (_wire.lease(tag, limits.LEASE_COUNT_MAX + 1), "bad_count", 400),
    ]:
        status, body = node.call("GET", request.path)
        assert status == status_expected and body["error"]["code"] == code, body
        op = operation(document, request)[1]
        validate(document, op["responses"][str(status)]["content"]["application/json"]["schema"], body)
        # Each is the caller's: raised at once, never retried on another server.
        raised = errors.from_http(status, json.dumps(body).encode(), tag)
        assert isinstance(raised, errors.IdmintError), raised
    uuid.UUID(node.call("GET", _wire.uuid7(1).path)[1]["ids"][0])


def test_the_names_the_client_reads_from_a_strict_take_are_documented_headers(document, node):
    op = operation(document, _wire.ids("order", 1))[1]
    headers = op["responses"]["200"].get("headers", {})
    for name in (_wire.NODE_HEADER, _wire.OWNER_HEADER):
        assert name in headers, f"GET /v1/segment/{{tag}} 200 documents no header {name}"
        schema = headers[name].get("schema")
        assert schema is None or resolve(document, schema).get("type") == "string", (name, schema)
    # And a live strict take carries them: a lone node names itself as the owner.
    strict = unique("contract-named")
    node.create_tag(strict, strict=True)
    self_name, owner = node.named(strict)
    assert self_name and owner == self_name, (self_name, owner)
