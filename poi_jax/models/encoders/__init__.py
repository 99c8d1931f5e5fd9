"""Flax BERT-family encoders with HuggingFace parameter layout, loading and export."""
from poi_jax.models.encoders.albert import AlbertModel
from poi_jax.models.encoders.base import EncoderOutput, count_params
from poi_jax.models.encoders.bert import BertModel, RobertaModel
from poi_jax.models.encoders.config import EncoderConfig
from poi_jax.models.encoders.load import (CheckpointError, LoadReport, build_encoder,
                                          encoder_state_dict, export_pretrained,
                                          load_encoder_weights, load_pretrained,
                                          load_state_dict_into, read_config,
                                          resolve_checkpoint)
