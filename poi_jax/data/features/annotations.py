"""Annotated documents for DASSA's views, at their old place: the types and vocabularies are in
`poi_jax.data.records`, the JSON-lines parsing in `poi_jax.data.readers.annotations`."""
from poi_jax.data.readers.annotations import parse_document, parse_relation  # noqa: F401
from poi_jax.data.records import (SENSES, SRL_TAGS, AnnotationError, Arg,  # noqa: F401
                                  Document, Relation)
