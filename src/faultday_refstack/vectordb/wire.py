"""The bodies, query strings and path parameters of the Qdrant REST routes this front serves.

Each model mirrors the Qdrant type of the same name (its REST schema) for the part this
front implements. Qdrant first deserialises a request (serde) and then validates it, and
the two failures answer differently; so do ours:

* input that does not fit the type (a wrong JSON type, a negative ``usize``, a missing
  field, ``NaN``, JSON nested deeper than serde allows) is
  ``400 Format error in JSON body: <field>: <what>``;
* input that fits but breaks a rule (``limit`` 0, ``size`` 0, a collection name of
  5000 characters) is ``422 Validation error in JSON body: [<field>: <what>, ...]``.

Unknown keys are ignored, as serde does for Qdrant's request types, except inside a
``Filter`` where Qdrant refuses them. Semantic errors that need the collection (a vector
of the wrong dimension, a multivector for a dense vector) are the engine's.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    Tag,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

U64_MAX = 2**64 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
F32_MAX = 3.4028234663852886e38
MAX_DEPTH = 128  # serde_json's recursion limit: Qdrant refuses deeper JSON outright
MAX_BODY = 32 * 1024 * 1024  # Qdrant's default service.max_request_size_mb
MAX_DIM = 65536  # Qdrant's largest dense vector
NAME_MAX = 255  # Qdrant's longest collection or alias name
NAME_FORBIDDEN = '<>:"/\\|?*\0\x1f'  # characters Qdrant refuses in a new collection's name

# The error type that marks a rule (validation, 422) rather than a shape (format, 400).
_RULE = "qdrant_rule"

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class ApiError(Exception):
    """An error answered as Qdrant does: ``{"status": {"error": message}, "time": 0.0}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _rule(message: str, **ctx: object) -> PydanticCustomError:
    return PydanticCustomError(_RULE, message, dict(ctx))


def _shape(message: str, **ctx: object) -> PydanticCustomError:
    return PydanticCustomError("qdrant_format", message, dict(ctx))


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- scalars ------------------------------------------------------------------------


def _u64(value: int) -> int:
    if not 0 <= value <= U64_MAX:
        raise _shape("invalid value: integer `{value}`, expected u64", value=_short(value))
    return value


def _i64(value: int) -> int:
    if not I64_MIN <= value <= I64_MAX:
        raise _shape("invalid value: integer `{value}`, expected i64", value=_short(value))
    return value


def _at_least(low: int) -> AfterValidator:
    def check(value: int) -> int:
        if value < low:
            raise _rule("value {value} invalid, must be {low} or larger", value=value, low=low)
        return value

    return AfterValidator(check)


def _between(low: float, high: float) -> AfterValidator:
    def check(value: float) -> float:
        if not low <= value <= high:
            raise _rule(
                "value {value} invalid, must be from {low} to {high}",
                value=_short(value),
                low=low,
                high=high,
            )
        return value

    return AfterValidator(check)


U64 = Annotated[int, AfterValidator(_u64)]
I64 = Annotated[int, AfterValidator(_i64)]
Limit = Annotated[U64, _at_least(1)]


def _point_id(raw: object) -> int | uuid.UUID:
    bad = _shape(
        "value {value} is not a valid point ID, valid values are either an unsigned integer "
        "or a UUID",
        value=_short(raw),
    )
    if isinstance(raw, bool):
        raise bad
    if isinstance(raw, int):
        if not 0 <= raw <= U64_MAX:
            raise bad
        return raw
    if isinstance(raw, str):
        try:
            return uuid.UUID(raw)
        except ValueError:
            raise bad from None
    raise bad


PointId = Annotated[int | uuid.UUID, PlainValidator(_point_id)]


def parse_point_id(raw: str) -> int | uuid.UUID:
    """A point id from a URL path segment (digits or a UUID)."""
    try:
        return _point_id(int(raw) if raw.isascii() and raw.isdigit() else raw)
    except PydanticCustomError as exc:
        raise ApiError(400, f"Format error in path parameters: id: {exc.message()}") from None


# Qdrant's JSON path grammar (lib/segment/src/json_path/parse.rs): keys of letters, digits,
# `_` and `-`, or quoted; `.key`, `[n]` and `[]` after the first.
_KEY = r'(?:[\w-]+|"[^\\"]*")'
_JSON_PATH = re.compile(rf"{_KEY}(?:\.{_KEY}|\[[0-9]+\]|\[\])*")
_QUOTED = re.compile(r'"[^\\"]*"')


def _json_path(value: str) -> str:
    """A payload key as Qdrant parses it; qdrant-edge refuses what this refuses."""
    unquoted = _QUOTED.sub("", value)
    indices = re.findall(r"\[([0-9]+)\]", unquoted)
    if not _JSON_PATH.fullmatch(value) or any(int(i) > U64_MAX for i in indices):
        raise _shape("Invalid json path: '{path}'", path=_short(value)[1:-1])
    return value


JsonPath = Annotated[str, AfterValidator(_json_path)]


def _number(raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise _shape("invalid type: {value}, expected a number", value=_short(raw))
    value = float(raw)
    if not math.isfinite(value) or abs(value) > F32_MAX:
        raise _shape("invalid value: {value} is out of range for f32", value=_short(raw))
    return value


# -- vectors --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MultiVector:
    """A multivector (a list of dense vectors), as Qdrant's ColBERT-style vectors."""

    vectors: tuple[tuple[float, ...], ...]


@dataclass(frozen=True, slots=True)
class SparseVector:
    """A sparse vector: indices and their values."""

    indices: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class InferenceInput:
    """A document, image or object that Qdrant would embed with a model server."""

    kind: str


@dataclass(frozen=True, slots=True)
class NamedVectors:
    """Vectors by name (``{"": [...]}`` names the default, unnamed vector)."""

    vectors: tuple[tuple[str, VectorInput], ...]


VectorInput = tuple[float, ...] | MultiVector | SparseVector | InferenceInput | NamedVectors
_INFERENCE = ("text", "image", "object")


def _dense(raw: list[Any]) -> tuple[float, ...]:
    if not raw:
        raise _rule("dense vector must not be empty")
    return tuple(_number(x) for x in raw)


def _sparse(raw: Mapping[str, Any]) -> SparseVector:
    indices, values = raw.get("indices"), raw.get("values")
    if not isinstance(indices, list) or not isinstance(values, list):
        raise _shape("a sparse vector needs `indices` and `values` lists")
    for i in indices:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < 2**32:
            raise _shape("invalid sparse index {value}, expected u32", value=_short(i))
    if len(indices) != len(values):
        raise _rule("values: must be the same length as indices")
    return SparseVector(tuple(indices), tuple(_number(v) for v in values))


def vector_input(raw: object, *, named: bool = True) -> VectorInput:
    """A vector as Qdrant's untagged ``VectorInput``/``VectorStruct`` accepts it."""
    if isinstance(raw, list):
        if raw and all(isinstance(x, list) for x in raw):
            if any(not x for x in raw):
                raise _rule("all vectors must be non-empty")
            return MultiVector(tuple(_dense(x) for x in raw))
        return _dense(raw)
    if isinstance(raw, dict):
        if "indices" in raw or "values" in raw:
            return _sparse(raw)
        kind = next((k for k in _INFERENCE if k in raw and "model" in raw), None)
        if kind is not None:
            return InferenceInput(kind)
        if named:
            return NamedVectors(
                tuple((str(k), vector_input(v, named=False)) for k, v in raw.items())
            )
    raise _shape("data did not match any variant of untagged enum VectorStruct")


Vector = Annotated[VectorInput, PlainValidator(vector_input)]


# -- models ---------------------------------------------------------------------------


class Body(BaseModel):
    """A Qdrant request body: strict JSON types, unknown keys ignored as serde does."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True, allow_inf_nan=False)


class PayloadField(Body):
    key: JsonPath


def _match_value(raw: object) -> str | int | bool:
    if isinstance(raw, str | bool):
        return raw
    if isinstance(raw, int):
        return _i64(raw)
    raise _shape("data did not match any variant of untagged enum ValueVariants")


def _match_any(raw: object) -> list[str] | list[int]:
    if isinstance(raw, list):
        if all(isinstance(x, str) for x in raw):
            return list(raw)
        if all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
            return [_i64(x) for x in raw]
    raise _shape("data did not match any variant of untagged enum AnyVariants")


MatchScalar = Annotated[str | int | bool, PlainValidator(_match_value)]
MatchList = Annotated[list[str] | list[int], PlainValidator(_match_any)]


class MatchValue(Body):
    value: MatchScalar


class MatchText(Body):
    text: str


class MatchTextAny(Body):
    text_any: str


class MatchPhrase(Body):
    phrase: str


class MatchPrefix(Body):
    prefix: str


class MatchSubstring(Body):
    substring: str


class MatchAny(Body):
    any: MatchList


class MatchExcept(Body):
    except_: MatchList = Field(alias="except")


def _key_kind(*keys: str) -> Callable[[object], str | None]:
    """An untagged enum's variant, told apart by which key a JSON object carries."""

    def kind(raw: object) -> str | None:
        if isinstance(raw, BaseModel):
            raw = raw.model_dump(by_alias=True, exclude_none=True)
        if isinstance(raw, dict):
            return next((f"<{k}>" for k in keys if k in raw), None)
        return None

    return kind


def _untagged(name: str, *keys: str) -> Discriminator:
    return Discriminator(
        _key_kind(*keys),
        custom_error_type="qdrant_format",
        custom_error_message=f"data did not match any variant of untagged enum {name}",
    )


Match = Annotated[
    Annotated[MatchValue, Tag("<value>")]
    | Annotated[MatchText, Tag("<text>")]
    | Annotated[MatchTextAny, Tag("<text_any>")]
    | Annotated[MatchPhrase, Tag("<phrase>")]
    | Annotated[MatchPrefix, Tag("<prefix>")]
    | Annotated[MatchSubstring, Tag("<substring>")]
    | Annotated[MatchAny, Tag("<any>")]
    | Annotated[MatchExcept, Tag("<except>")],
    _untagged(
        "Match", "value", "text", "text_any", "phrase", "prefix", "substring", "any", "except"
    ),
]


def _range_bound(raw: object) -> float | str:
    if isinstance(raw, str):
        return raw  # an RFC 3339 datetime; the engine parses it
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise _shape("data did not match any variant of untagged enum RangeInterface")
    return float(raw)


Bound = Annotated[float | str, PlainValidator(_range_bound)]


class Range(Body):
    lt: Bound | None = None
    gt: Bound | None = None
    gte: Bound | None = None
    lte: Bound | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Range:
        kinds = {type(b) for b in (self.lt, self.gt, self.gte, self.lte) if b is not None}
        if len(kinds) > 1:
            raise _shape("data did not match any variant of untagged enum RangeInterface")
        return self


class ValuesCount(Body):
    lt: U64 | None = None
    gt: U64 | None = None
    gte: U64 | None = None
    lte: U64 | None = None


class GeoPoint(Body):
    lon: float
    lat: float

    @model_validator(mode="after")
    def _on_earth(self) -> GeoPoint:
        # Qdrant checks this while deserialising (a format error, not a validation error).
        if not (-180 <= self.lon <= 180 and -90 <= self.lat <= 90):
            raise _shape(
                "Wrong format of GeoPoint payload: expected `lat` = {lat} within [-90;90] "
                "and `lon` = {lon} within [-180;180]",
                lat=self.lat,
                lon=self.lon,
            )
        return self


class GeoBoundingBox(Body):
    top_left: GeoPoint
    bottom_right: GeoPoint


class GeoRadius(Body):
    center: GeoPoint
    radius: float


class GeoLineString(Body):
    points: list[GeoPoint]

    @model_validator(mode="after")
    def _closed(self) -> GeoLineString:
        if len(self.points) < 4:
            raise _rule("value invalid, the size must be at least 4, got {n}", n=len(self.points))
        if self.points[0] != self.points[-1]:
            raise _rule(
                "value invalid, the first and the last points should be same to form a closed line"
            )
        return self


class GeoPolygon(Body):
    exterior: GeoLineString
    interiors: list[GeoLineString] | None = None


class FieldCondition(Body):
    key: JsonPath
    match: Match | None = None
    range: Range | None = None
    geo_bounding_box: GeoBoundingBox | None = None
    geo_radius: GeoRadius | None = None
    geo_polygon: GeoPolygon | None = None
    values_count: ValuesCount | None = None
    is_empty: bool | None = None
    is_null: bool | None = None

    @model_validator(mode="after")
    def _something(self) -> FieldCondition:
        fields = (self.match, self.range, self.values_count, self.is_empty, self.is_null)
        geo = (self.geo_bounding_box, self.geo_radius, self.geo_polygon)
        if all(f is None for f in fields + geo):
            raise _rule("At least one field condition must be specified")
        return self


class IsEmptyCondition(Body):
    is_empty: PayloadField


class IsNullCondition(Body):
    is_null: PayloadField


class HasIdCondition(Body):
    has_id: list[PointId]


class HasVectorCondition(Body):
    has_vector: str


def _u32(value: int) -> int:
    if not 0 <= value < 2**32:
        raise _shape("invalid value: integer `{value}`, expected u32", value=_short(value))
    return value


U32 = Annotated[int, AfterValidator(_u32)]


def _nonzero(value: int) -> int:
    if value == 0:
        raise _shape("invalid value: integer `0`, expected a nonzero u32")
    return value


class Slice(Body):
    total: Annotated[U32, AfterValidator(_nonzero)]
    index: U32


class SliceCondition(Body):
    slice: Slice

    @model_validator(mode="after")
    def _in_range(self) -> SliceCondition:
        if self.slice.index >= self.slice.total:
            raise _rule("Slice index must be less than the total number of slices")
        return self


class Nested(Body):
    key: JsonPath
    filter: Filter


class NestedCondition(Body):
    nested: Nested


def _one_or_many(raw: object) -> object:
    return [raw] if isinstance(raw, dict) else raw


_FILTER_KEYS = ("must", "should", "must_not", "min_should")


def _condition_kind(raw: object) -> str | None:
    if isinstance(raw, Filter):
        return "<filter>"
    kind = _key_kind("key", "is_empty", "is_null", "has_id", "has_vector", "slice", "nested")(raw)
    # serde tries Filter last; it has no required field, but it refuses unknown ones.
    if kind is None and isinstance(raw, dict) and set(raw) <= set(_FILTER_KEYS):
        return "<filter>"
    return kind


Condition = Annotated[
    Annotated[FieldCondition, Tag("<key>")]
    | Annotated[IsEmptyCondition, Tag("<is_empty>")]
    | Annotated[IsNullCondition, Tag("<is_null>")]
    | Annotated[HasIdCondition, Tag("<has_id>")]
    | Annotated[HasVectorCondition, Tag("<has_vector>")]
    | Annotated[SliceCondition, Tag("<slice>")]
    | Annotated[NestedCondition, Tag("<nested>")]
    | Annotated["Filter", Tag("<filter>")],
    Discriminator(
        _condition_kind,
        custom_error_type="qdrant_format",
        custom_error_message="data did not match any variant of untagged enum Condition",
    ),
]
Conditions = Annotated[list[Condition], BeforeValidator(_one_or_many)]


class MinShould(Body):
    conditions: list[Condition]
    min_count: U64


class Filter(Body):
    """Qdrant's ``Filter``; unlike other bodies it refuses unknown keys, as Qdrant does."""

    model_config = ConfigDict(extra="forbid")

    must: Conditions | None = None
    should: Conditions | None = None
    must_not: Conditions | None = None
    min_should: MinShould | None = None


Nested.model_rebuild()
NestedCondition.model_rebuild()
MinShould.model_rebuild()
Filter.model_rebuild()


@dataclass(frozen=True, slots=True)
class PayloadSelector:
    """``with_payload`` as ``{"include": [...]}`` or ``{"exclude": [...]}``."""

    exclude: bool
    keys: tuple[str, ...]


def _str_list(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        raise _shape("expected a list of strings")
    return tuple(raw)


def _paths(raw: object) -> tuple[str, ...]:
    return tuple(_json_path(k) for k in _str_list(raw))


def _with_payload(raw: object) -> bool | tuple[str, ...] | PayloadSelector:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, list):
        return _paths(raw)
    if isinstance(raw, dict) and len(raw) == 1 and ("include" in raw or "exclude" in raw):
        ((kind, keys),) = raw.items()
        return PayloadSelector(exclude=kind == "exclude", keys=_paths(keys))
    raise _shape("data did not match any variant of untagged enum WithPayloadInterface")


def _with_vector(raw: object) -> bool | tuple[str, ...]:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, list):
        return _str_list(raw)
    raise _shape("data did not match any variant of untagged enum WithVector")


WithPayload = Annotated[bool | tuple[str, ...] | PayloadSelector, PlainValidator(_with_payload)]
WithVector = Annotated[bool | tuple[str, ...], PlainValidator(_with_vector)]
Payload = dict[str, Any]


class SearchParams(Body):
    hnsw_ef: U64 | None = None
    exact: bool = False
    indexed_only: bool = False


class _Read(Body):
    filter: Filter | None = None
    with_payload: WithPayload | None = None
    with_vector: WithVector | None = None


def _search_vector(raw: object) -> VectorInput:
    if isinstance(raw, dict) and set(raw) == {"name", "vector"}:
        name = raw["name"]
        if not isinstance(name, str):
            raise _shape("invalid type: {value}, expected a vector name", value=_short(name))
        return NamedVectors(((name, vector_input(raw["vector"], named=False)),))
    return vector_input(raw, named=False)


class SearchRequest(_Read):
    """``POST /collections/{name}/points/search`` (Qdrant's ``SearchRequest``)."""

    vector: Annotated[VectorInput, PlainValidator(_search_vector)]
    params: SearchParams | None = None
    limit: Limit
    offset: U64 | None = None
    score_threshold: float | None = None


QUERY_KINDS = (
    "nearest",
    "recommend",
    "discover",
    "context",
    "order_by",
    "fusion",
    "rrf",
    "formula",
    "sample",
    "relevance_feedback",
)


@dataclass(frozen=True, slots=True)
class OtherQuery:
    """A query this front does not run (recommend, fusion, by point id, ...)."""

    kind: str


QueryInput = VectorInput | OtherQuery


def _query(raw: object) -> QueryInput:
    if isinstance(raw, dict):
        kind = next((k for k in QUERY_KINDS if k in raw), None)
        if kind == "nearest":
            if raw.get("mmr") is not None:
                return OtherQuery("nearest with mmr")
            return vector_input(raw["nearest"])
        if kind is not None:
            return OtherQuery(kind)
    if isinstance(raw, int | str) and not isinstance(raw, bool):
        _point_id(raw)
        return OtherQuery("point id")
    return vector_input(raw, named=False)


class QueryRequest(_Read):
    """``POST /collections/{name}/points/query`` (Qdrant's ``QueryRequest``)."""

    prefetch: Any = None
    query: Annotated[QueryInput, PlainValidator(_query)] | None = None
    using: str | None = None
    params: SearchParams | None = None
    limit: Limit | None = None
    offset: U64 | None = None
    score_threshold: float | None = None


class CountRequest(Body):
    """``POST /collections/{name}/points/count``."""

    filter: Filter | None = None
    exact: bool = True


class ScrollRequest(_Read):
    """``POST /collections/{name}/points/scroll``."""

    offset: PointId | None = None
    limit: Limit | None = None
    order_by: Any = None


class PointRequest(Body):
    """``POST /collections/{name}/points`` (retrieve by ids)."""

    ids: list[PointId]
    with_payload: WithPayload | None = None
    with_vector: WithVector | None = None


class PointStruct(Body):
    id: PointId
    vector: Vector
    payload: Payload | None = None


class PointsList(Body):
    points: list[PointStruct]


def _batch_vectors(raw: object) -> list[VectorInput]:
    if isinstance(raw, list):
        return [vector_input(v, named=False) for v in raw]
    if isinstance(raw, dict):
        raise _shape("named batch vectors are not supported by this front")
    raise _shape("data did not match any variant of untagged enum BatchVectorStruct")


class Batch(Body):
    ids: list[PointId]
    vectors: Annotated[list[VectorInput], PlainValidator(_batch_vectors)]
    payloads: list[Payload | None] | None = None

    @model_validator(mode="after")
    def _same_length(self) -> Batch:
        if len(self.vectors) != len(self.ids):
            raise _rule("number of ids and vectors must be equal")
        if self.payloads is not None and len(self.payloads) != len(self.ids):
            raise _rule("number of ids and payloads must be equal")
        return self


class PointsBatch(Body):
    batch: Batch


Upsert = Annotated[
    Annotated[PointsList, Tag("<points>")] | Annotated[PointsBatch, Tag("<batch>")],
    _untagged("PointInsertOperations", "points", "batch"),
]
UPSERT: TypeAdapter[PointsList | PointsBatch] = TypeAdapter(Upsert)


class PointIdsList(Body):
    points: list[PointId]


class FilterSelector(Body):
    filter: Filter


PointsSelector = Annotated[
    Annotated[PointIdsList, Tag("<points>")] | Annotated[FilterSelector, Tag("<filter>")],
    _untagged("PointsSelector", "points", "filter"),
]
POINTS_SELECTOR: TypeAdapter[PointIdsList | FilterSelector] = TypeAdapter(PointsSelector)


Distance = Literal["Cosine", "Euclid", "Dot", "Manhattan"]


class VectorParams(Body):
    size: Annotated[U64, _between(1, MAX_DIM)]
    distance: Distance
    multivector_config: Any = None


def _vectors_kind(raw: object) -> str | None:
    if isinstance(raw, VectorParams) or (isinstance(raw, dict) and "size" in raw):
        return "<single>"
    return "<named>" if isinstance(raw, dict) else None


class CreateCollection(Body):
    """``PUT /collections/{name}``: only a single unnamed dense vector is supported."""

    vectors: (
        Annotated[
            Annotated[VectorParams, Tag("<single>")]
            | Annotated[dict[str, VectorParams], Tag("<named>")],
            Discriminator(
                _vectors_kind,
                custom_error_type="qdrant_format",
                custom_error_message="data did not match any variant of untagged enum "
                "VectorsConfig",
            ),
        ]
        | None
    ) = None
    sparse_vectors: dict[str, Any] | None = None
    shard_number: Annotated[U64, _at_least(1)] | None = None
    replication_factor: Annotated[U64, _at_least(1)] | None = None
    write_consistency_factor: Annotated[U64, _at_least(1)] | None = None
    on_disk_payload: bool | None = None


PayloadSchemaType = Literal[
    "keyword", "integer", "float", "geo", "text", "bool", "datetime", "uuid"
]


class PayloadSchemaParams(Body):
    type: PayloadSchemaType


def _schema_kind(raw: object) -> str | None:
    if isinstance(raw, str):
        return "<type>"
    return "<params>" if isinstance(raw, dict | PayloadSchemaParams) else None


class CreateFieldIndex(Body):
    """``PUT /collections/{name}/index``."""

    field_name: JsonPath
    field_schema: (
        Annotated[
            Annotated[PayloadSchemaType, Tag("<type>")]
            | Annotated[PayloadSchemaParams, Tag("<params>")],
            Discriminator(
                _schema_kind,
                custom_error_type="qdrant_format",
                custom_error_message="data did not match any variant of untagged enum "
                "PayloadFieldSchema",
            ),
        ]
        | None
    ) = None

    @property
    def schema_type(self) -> str:
        if isinstance(self.field_schema, PayloadSchemaParams):
            return self.field_schema.type
        return self.field_schema or "keyword"


def _name_rule(value: str) -> str:
    if not 1 <= len(value) <= NAME_MAX:
        raise _rule(
            "value invalid, must be from 1 to {high} characters (got {n})",
            high=NAME_MAX,
            n=len(value),
        )
    return value


Name = Annotated[str, AfterValidator(_name_rule)]


class CreateAlias(Body):
    collection_name: Name
    alias_name: Name


class DeleteAlias(Body):
    alias_name: Name


class RenameAlias(Body):
    old_alias_name: Name
    new_alias_name: Name


class CreateAliasOperation(Body):
    create_alias: CreateAlias


class DeleteAliasOperation(Body):
    delete_alias: DeleteAlias


class RenameAliasOperation(Body):
    rename_alias: RenameAlias


AliasOperation = Annotated[
    Annotated[CreateAliasOperation, Tag("<create_alias>")]
    | Annotated[DeleteAliasOperation, Tag("<delete_alias>")]
    | Annotated[RenameAliasOperation, Tag("<rename_alias>")],
    _untagged("AliasOperations", "create_alias", "delete_alias", "rename_alias"),
]


class ChangeAliases(Body):
    """``POST /collections/aliases``."""

    actions: list[AliasOperation]


class Degrade(Body):
    """``POST /admin/degrade`` (faultday's own)."""

    mode: str


# -- query strings and path parameters ----------------------------------------------


def _q_u64(raw: object) -> int:
    if isinstance(raw, str) and raw.isascii() and raw.isdigit():
        return _u64(int(raw))
    raise _shape("invalid digit found in string")


def _q_nonzero(raw: object) -> int:
    value = _q_u64(raw)
    if value == 0:
        raise _shape("invalid value: integer `0`, expected a nonzero u64")
    return value


def _q_bool(raw: object) -> bool:
    if raw in ("true", "false"):
        return raw == "true"
    raise _shape("provided string was not `true` or `false`")


def _q_consistency(raw: object) -> int | str:
    if raw in ("all", "majority", "quorum", ""):
        return str(raw)
    return _q_nonzero(raw)


class Query(BaseModel):
    """A query string: values arrive as text and are parsed as serde_urlencoded does."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class WaitTimeout(Query):
    """The query of collection and alias operations."""

    timeout: Annotated[int, PlainValidator(_q_u64), _at_least(1)] | None = None


class UpdateParams(Query):
    """The query of point and index updates."""

    wait: Annotated[bool, PlainValidator(_q_bool)] | None = None
    ordering: Literal["weak", "medium", "strong"] | None = None
    timeout: Annotated[int, PlainValidator(_q_nonzero)] | None = None


class ReadParams(Query):
    """The query of searches, scrolls, counts and retrievals."""

    consistency: Annotated[int | str, PlainValidator(_q_consistency)] | None = None
    timeout: Annotated[int, PlainValidator(_q_nonzero)] | None = None


def collection_name(name: str, *, new: bool = False) -> str:
    """Check a collection name from the path as Qdrant does (stricter for a new collection)."""
    problems = []
    if not 1 <= len(name) <= NAME_MAX:
        problems.append(
            f"name: value invalid, must be from 1 to {NAME_MAX} characters (got {len(name)})"
        )
    bad = next((c for c in NAME_FORBIDDEN if c in name), None)
    if new and bad is not None:
        problems.append(f"name: collection name cannot contain {json.dumps(bad)} char")
    if problems:
        raise ApiError(422, f"Validation error in path parameters: [{'; '.join(problems)}]")
    return name


# -- parsing --------------------------------------------------------------------------


def _constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _depth(value: object) -> int:
    """How deeply arrays and objects nest in ``value`` (iterative: any depth is safe)."""
    deepest = 0
    stack: list[tuple[dict[str, Any] | list[Any], int]] = []
    if isinstance(value, dict | list):
        stack.append((value, 1))
    while stack and deepest <= MAX_DEPTH:
        item, level = stack.pop()
        deepest = max(deepest, level)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, level + 1) for c in children if isinstance(c, dict | list))
    return deepest


def decode(raw: bytes) -> object:
    """JSON as serde_json reads it: no NaN or Infinity, at most ``MAX_DEPTH`` levels."""
    if len(raw) > MAX_BODY:
        raise ApiError(
            413, f"JSON payload ({len(raw)} bytes) is larger than allowed (limit: {MAX_BODY} bytes)"
        )
    try:
        data = json.loads(raw, parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        raise ApiError(400, "Format error in JSON body: recursion limit exceeded") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ApiError(400, f"Format error in JSON body: {exc}") from None
    if _depth(data) > MAX_DEPTH:
        raise ApiError(400, "Format error in JSON body: recursion limit exceeded")
    return data


def parse_body(model: type[M], raw: bytes) -> M:
    """Decode and validate a request body, or raise the ApiError Qdrant would answer."""
    data = decode(raw)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _api_error("JSON body", exc.errors(include_url=False)) from None


def parse_union(adapter: TypeAdapter[T], raw: bytes) -> T:
    """Like ``parse_body`` for a union of bodies (``UPSERT``, ``POINTS_SELECTOR``)."""
    data = decode(raw)
    try:
        return adapter.validate_python(data, strict=True)
    except ValidationError as exc:
        raise _api_error("JSON body", exc.errors(include_url=False)) from None


def parse_query(model: type[M], params: Mapping[str, str]) -> M:
    """Validate a query string, or raise Qdrant's answer (400 deserialize, 422 rule)."""
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        raise _api_error("query", exc.errors(include_url=False)) from None


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not part.startswith("<"):  # a union's tag, not a field
            out += f".{part}" if out else part
    return out


def _describe(err: ErrorDetails) -> str:
    where = _path(err["loc"])
    if err["type"] == "missing":
        *parent, name = [p for p in err["loc"] if not (isinstance(p, str) and p[:1] == "<")]
        head = _path(tuple(parent))
        return f"{head + ': ' if head else ''}missing field `{name}`"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    return f"{where}: {msg}" if where else msg


def _api_error(where: str, errors: list[ErrorDetails]) -> ApiError:
    # serde stops at the first bad value it reads; a missing field shows only at the end.
    shapes = sorted((e for e in errors if e["type"] != _RULE), key=lambda e: e["type"] == "missing")
    if shapes:
        head = "Deserialize error in query" if where == "query" else f"Format error in {where}"
        return ApiError(400, f"{head}: {_describe(shapes[0])}")
    rules = "; ".join(_describe(e) for e in errors)
    return ApiError(422, f"Validation error in {where}: [{rules}]")
