"""`bench/step_profile.py` attributes a traced step's ops to the model's parts by the named
scopes of `poi_jax.models.poi_net` (they must reach the compiled HLO's metadata, backward ops
included), and sums a trace's op times by part."""
import jax
import jax.numpy as jnp
import numpy as np

from bench import step_profile


def test_scopes_reach_the_compiled_hlo_of_a_gradient_and_are_classified():
  def loss(x):
    with jax.named_scope("pos_embedding"):
      x = x * 2.0
    with jax.named_scope("encoder"):
      x = jnp.tanh(x)
    with jax.named_scope("coattention"):
      x = x / (1.0 + jnp.max(x))
    return jnp.sum(x ** 2)

  hlo = jax.jit(jax.grad(loss)).lower(jnp.ones((4, 3))).compile().as_text()
  names = step_profile.op_names(hlo)
  parts = {step_profile.part_of(n) for n in names.values()}
  assert {"encoder", "coattention"} <= parts
  assert any("transpose(jvp(" in n and step_profile.part_of(n) == "encoder"
             for n in names.values()), "backward ops carry the forward op's scope"


def test_part_of_matches_whole_scope_names_only():
  assert step_profile.part_of("jit(step)/jvp(coattention)/mul") == "coattention"
  assert step_profile.part_of("jit(step)/transpose(jvp(encoder))/dot") == "encoder"
  assert step_profile.part_of("jit(step)/jvp(pos_embedding)/eq") == "pos_embedding"
  assert step_profile.part_of("jit(step)/encoder_norm/add") == "other"
  assert step_profile.part_of("state[0]['encoder']['bias'].value") == "other"


def test_device_events_sum_by_op_and_keep_device_streams_on_a_gpu():
  trace = {"traceEvents": [
      {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
      {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:CPU"}},
      {"ph": "X", "pid": 1, "dur": 5.0, "args": {"hlo_op": "fusion.1"}},
      {"ph": "X", "pid": 1, "dur": 7.0, "args": {"hlo_op": "fusion.1"}},
      {"ph": "X", "pid": 2, "dur": 100.0, "args": {"hlo_op": "fusion.1"}},  # the launch
      {"ph": "X", "pid": 1, "dur": 3.0, "args": {}},
  ]}
  events = list(step_profile.device_events(trace))
  assert events == [("fusion.1", 5.0), ("fusion.1", 7.0)]
  assert np.isclose(sum(us for _, us in events), 12.0)
