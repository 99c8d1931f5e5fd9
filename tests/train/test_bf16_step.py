"""The bfloat16 train step as the engine builds it (`poi_jax.train.step.create_sharded_state`), read from
its lowered StableHLO: no gather or scatter touches a bfloat16 copy of a parameter table (on a
GPU a bfloat16 scatter-add into a 2- or 40-row table is a serialised compare-and-swap loop, which
made the bf16 step 4x slower than float32), the encoder's matmuls are bfloat16, and parameters
and optimizer state stay float32."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import race, squad2
from poi_jax import tasks
from poi_jax.train import optim, placement
from poi_jax.train import step as step_lib
from poi_jax.train import mesh as mesh_lib

_TYPE = r"tensor<([0-9x]*)x(bf16|f32|f16|i32|i64|i1)>"


def _qa_batch(b, l):
  return {"input_ids": np.ones((b, l), np.int32), "attention_mask": np.ones((b, l), np.int32),
          "token_type_ids": np.zeros((b, l), np.int32), "pos_tags": np.ones((b, l), np.int32),
          "con_start": np.full((b,), 9, np.int32), "con_end": np.full((b,), l - 1, np.int32),
          "start_positions": np.full((b,), 10, np.int32),
          "end_positions": np.full((b,), 12, np.int32)}


def _choice_batch(b, c, l):
  full = lambda v: np.full((b, c), v, np.int32)
  return {"input_ids": np.ones((b, c, l), np.int32),
          "attention_mask": np.ones((b, c, l), np.int32),
          "token_type_ids": np.zeros((b, c, l), np.int32),
          "pos_tags": np.ones((b, c, l), np.int32), "con_start": full(9), "con_end": full(l - 1),
          "p_end": full(8), "q_start": full(9), "q_end": full(l - 2),
          "labels": np.zeros((b,), np.int32)}


CASES = {
    "squad2-poi": (squad2, "poi", lambda: _qa_batch(3, 48)),
    "race-poi": (race, "poi", lambda: _choice_batch(3, 2, 48)),
    "race-duma-pos": (race, "duma", lambda: _choice_batch(3, 2, 48)),
}


def _lowered_step(case, dtype="bfloat16"):
  cfg_mod, head, make_batch = CASES[case]
  config = cfg_mod.get_config("tiny")
  with config.unlocked():
    config.model.dtype = dtype
    config.model.head = head
    config.model.pos_embedding = True
  mesh = mesh_lib.make_mesh(config.mesh)
  model = tasks.build_model(config, nnx.Rngs(0))
  tx, _ = optim.make_optimizer(config.optim, 10)
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  batch = make_batch()
  b = batch["input_ids"].shape[0]
  with jax.set_mesh(mesh):
    run = step_lib.create_sharded_state(model, optimizer, mesh, config.mesh.rules,
                          {k: v.ndim for k, v in batch.items()})
    gb = placement.global_batch(dict(batch, example_mask=np.ones((b,), np.float32)), mesh)
    lowered = run.train_step.lower(run.state, gb)
  return model, run, lowered


def table_ops(text):
  """``(op, operand type)`` of every gather and scatter (the operand is the table)."""
  out = []
  for m in re.finditer(r'"stablehlo\.gather"\(.*? : \(' + _TYPE, text):
    out.append(("gather", m.group(1) + "x" + m.group(2)))
  # A scatter's signature follows its update region: the first "}) : (" after the op.
  for m in re.finditer(r'"stablehlo\.scatter"\(.*?\}\) : \(' + _TYPE, text, re.S):
    out.append(("scatter", m.group(1) + "x" + m.group(2)))
  return out


def dot_operand_types(text):
  """``[(lhs, rhs)]`` types of every dot_general, e.g. ``("2x32x64xbf16", "64x64xbf16")``, and
  of every call of the AMX matmul kernel (a CPU with AMX tiles runs a bfloat16 Linear there,
  `poi_jax.layers.matmul`)."""
  return [(a + "x" + ta, b + "x" + tb) for a, ta, b, tb in re.findall(
      r"(?:stablehlo\.dot_general |stablehlo\.custom_call @poi_jax_cpu_matmul_amx\().*? : \("
      + _TYPE + ", " + _TYPE + r"\)", text)]


@pytest.mark.parametrize("case", list(CASES))
def test_bf16_step_has_no_bf16_table_gathers_or_scatters(case):
  model, run, lowered = _lowered_step(case)
  text = lowered.as_text()
  ops = table_ops(text)
  assert any(op == "gather" for op, _ in ops), "the parser found no gather: it is broken"
  assert any(op == "scatter" for op, _ in ops), "the parser found no scatter: it is broken"
  tables = {"x".join(map(str, x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param))
            if x.ndim == 2}
  bad = [(op, t) for op, t in ops if t.endswith("bf16")]
  assert not bad, f"bfloat16 gathers/scatters: {bad}"
  # The two small tables (token types, POS) are one-hot matmuls: no gather at all.
  gathered = {t.rsplit("x", 1)[0] for _, t in ops}
  assert "2x32" not in gathered and "40x32" not in gathered, gathered
  assert "30522x32" in gathered and tables >= {"30522x32", "40x32", "2x32"}


@pytest.mark.parametrize("case", list(CASES))
def test_bf16_step_matmuls_are_bf16_and_state_float32(case):
  model, run, lowered = _lowered_step(case)
  dots = dot_operand_types(lowered.as_text())
  kernels = {"x".join(map(str, x.shape))
             for path, x in jax.tree_util.tree_leaves_with_path(nnx.state(model.encoder,
                                                                          nnx.Param))
             if x.ndim == 2 and "kernel" in jax.tree_util.keystr(path)}
  assert len(kernels) >= 3, kernels
  on_kernels = [(a, b) for a, b in dots
                if a.rsplit("x", 1)[0] in kernels or b.rsplit("x", 1)[0] in kernels]
  assert on_kernels, "no encoder matmul found"
  f32 = [(a, b) for a, b in on_kernels if not (a.endswith("bf16") and b.endswith("bf16"))]
  assert not f32, f"encoder matmuls not in bfloat16: {f32}"
  new_state = lowered.out_info[0]
  floats = [(p, x) for p, x in jax.tree_util.tree_leaves_with_path((run.state, new_state))
            if jnp.issubdtype(x.dtype, jnp.floating)]
  assert len(floats) > 2 * len(jax.tree.leaves(nnx.state(model, nnx.Param)))  # + Adam moments
  for path, leaf in floats:
      assert leaf.dtype == jnp.float32, (jax.tree_util.keystr(path), leaf.dtype)


def test_float32_step_has_no_bf16_at_all():
  """The float32 step is untouched by the bf16 policy (a check that the parser sees types)."""
  _, _, lowered = _lowered_step("squad2-poi", dtype="float32")
  text = lowered.as_text()
  assert "bf16" not in text and dot_operand_types(text)
