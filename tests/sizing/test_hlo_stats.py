"""`poi_jax.sizing.hlo_stats` (issue 39): a scanned layer stack's FLOPs are its body's times the
trip count (XLA's cost analysis counts the body once), and collective bytes are read from the
instructions, async pairs once, with their replica groups' sizes."""
import jax
import jax.numpy as jnp
import pytest

from poi_jax.sizing import hlo_stats

LAYERS, B, D = 6, 32, 256


def _stack(w, x):
  def body(c, wi):
    return jnp.tanh(c @ wi), None
  return jax.lax.scan(body, x, w)[0].sum()


def test_scan_flops_are_the_body_times_the_trip_count():
  compiled = jax.jit(jax.grad(_stack)).lower(
      jax.ShapeDtypeStruct((LAYERS, D, D), jnp.float32),
      jax.ShapeDtypeStruct((B, D), jnp.float32)).compile()
  stats = hlo_stats.analyze(compiled.as_text())
  per_layer = 2 * B * D * D
  # forward c @ w, backward dc @ w.T and c.T @ dy: 3 matmuls per layer
  assert stats.matmul_flops == 3 * LAYERS * per_layer
  assert sorted(t for _, t in stats.loops) == [LAYERS, LAYERS]
  raw = compiled.cost_analysis()
  raw = raw[0] if isinstance(raw, (list, tuple)) else raw
  # the raw analysis counts each loop body once: about one layer's 3 matmuls, not six
  assert raw["flops"] < 1.5 * 3 * per_layer
  assert stats.matmul_flops_once == 3 * per_layer


HLO = """HloModule m, entry_computation_layout={(f32[128,64]{1,0})->f32[512,64]{1,0}}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %a = f32[] add(%x, %y)
}

%body (p: (s32[], f32[512,64])) -> (s32[], f32[512,64]) {
  %p = (s32[], f32[512,64]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %v = f32[512,64]{1,0} get-tuple-element(%p), index=1
  %ar = f32[512,64]{1,0} all-reduce(%v), channel_id=1, replica_groups=[2,4]<=[8], to_apply=%add
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  ROOT %t = (s32[], f32[512,64]{1,0}) tuple(%j, %ar)
}

%cond (p: (s32[], f32[512,64])) -> pred[] {
  %p = (s32[], f32[512,64]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(5)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (w: f32[128,64]) -> f32[512,64] {
  %w = f32[128,64]{1,0} parameter(0)
  %ags = (f32[128,64]{1,0}, f32[512,64]{1,0}) all-gather-start(%w), channel_id=2, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}
  %ag = f32[512,64]{1,0} all-gather-done(%ags)
  %rs = f32[128,64]{1,0} reduce-scatter(%ag), channel_id=3, replica_groups=mesh['data'=2,'fsdp'=4] {'fsdp'}, dimensions={0}, to_apply=%add
  %zero = s32[] constant(0)
  %t = (s32[], f32[512,64]{1,0}) tuple(%zero, %ag)
  %loop = (s32[], f32[512,64]{1,0}) while(%t), condition=%cond, body=%body
  ROOT %out = f32[512,64]{1,0} get-tuple-element(%loop), index=1
}
"""


def test_collective_bytes_from_hlo_text():
  stats = hlo_stats.analyze(HLO, n_devices=8)
  c = stats.collectives
  full = 512 * 64 * 4
  assert stats.loops == [("loop", 5)]
  assert dict(c.count) == {"all-gather": 1, "reduce-scatter": 1, "all-reduce": 5}
  assert c.bytes["all-gather"] == full  # the gathered buffer, counted at -done only
  assert c.bytes["reduce-scatter"] == full  # its operand: result x group of 4
  assert c.bytes["all-reduce"] == 5 * full  # inside a loop of 5 trips
  assert c.wire["all-gather"] == pytest.approx(full * 3 / 4)
  assert c.wire["all-reduce"] == pytest.approx(5 * 2 * full * 3 / 4)


CONV = """HloModule c

ENTRY %main (a: bf16[6,4,128,16], b: bf16[6,4,128,16]) -> f32[6,4,128,128] {
  %a = bf16[6,4,128,16]{2,3,1,0} parameter(0)
  %b = bf16[6,4,128,16]{2,3,1,0} parameter(1)
  ROOT %c = f32[6,4,128,128]{2,3,1,0} convolution(%a, %b), window={size=6x4 stride=5x3 lhs_dilate=6x4}, dim_labels=01bf_01oi->01bf
}
"""


def test_tpu_batched_matmul_as_dilated_convolution():
  """TPU's form of ``bhqd,bhkd->bhqk`` (B=6, H=4, 128 x 128, d=16): the batch dims are dilated
  spatial dims that each output meets once, not a 6 x 4 window."""
  assert hlo_stats.analyze(CONV).matmul_flops == 2 * 6 * 4 * 128 * 128 * 16


# The TPU compiler's windowed (collective) matmul over an fsdp axis of 16 (its loops as v5e:4x4
# compiles `x @ w` with `w` sharded): the body is unrolled by 2 and its counter steps by 2 under an
# `i < 8` bound, so the loop runs 4 times, not 8; the batched matmul inside is a convolution
# whose size-2 batch dim is a window of 2 over an input of 1 padded 1 on each side (one real
# tap per output position, not two).
WINDOWED = """HloModule w

%conv (a: bf16[512,64,1], b: bf16[512,2,128]) -> bf16[64,2,128] {
  %a = bf16[512,64,1]{0,1,2} parameter(0)
  %b = bf16[512,2,128]{2,0,1} parameter(1)
  ROOT %c = bf16[64,2,128]{2,0,1} convolution(%a, %b), window={size=2 pad=1_1 rhs_reversal=1}, dim_labels=fb0_i0o->b0f
}

%body (p: (bf16[512,64,1], bf16[512,2,128], u32[])) -> (bf16[512,64,1], bf16[512,2,128], u32[]) {
  %p = (bf16[512,64,1]{0,1,2}, bf16[512,2,128]{2,0,1}, u32[]) parameter(0)
  %a = bf16[512,64,1]{0,1,2} get-tuple-element(%p), index=0
  %b = bf16[512,2,128]{2,0,1} get-tuple-element(%p), index=1
  %i = u32[] get-tuple-element(%p), index=2
  %f1 = bf16[64,2,128]{2,0,1} fusion(%a, %b), kind=kOutput, calls=%conv
  %f2 = bf16[64,2,128]{2,0,1} fusion(%a, %b), kind=kOutput, calls=%conv
  %two = u32[] constant(2)
  %j = u32[] add(%i, %two)
  ROOT %t = (bf16[512,64,1]{0,1,2}, bf16[512,2,128]{2,0,1}, u32[]) tuple(%a, %b, %j)
}

%cond (p: (bf16[512,64,1], bf16[512,2,128], u32[])) -> pred[] {
  %p = (bf16[512,64,1]{0,1,2}, bf16[512,2,128]{2,0,1}, u32[]) parameter(0)
  %n = u32[] constant(8)
  %i = u32[] get-tuple-element(%p), index=2
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (a: bf16[512,64,1], b: bf16[512,2,128]) -> bf16[512,64,1] {
  %a = bf16[512,64,1]{0,1,2} parameter(0)
  %b = bf16[512,2,128]{2,0,1} parameter(1)
  %zero = u32[] constant(0)
  %t = (bf16[512,64,1]{0,1,2}, bf16[512,2,128]{2,0,1}, u32[]) tuple(%a, %b, %zero)
  %loop = (bf16[512,64,1]{0,1,2}, bf16[512,2,128]{2,0,1}, u32[]) while(%t), condition=%cond, body=%body
  ROOT %out = bf16[512,64,1]{0,1,2} get-tuple-element(%loop), index=0
}
"""


def test_windowed_matmul_loop_steps_by_two_and_pads_its_batch_dim():
  stats = hlo_stats.analyze(WINDOWED)
  assert stats.loops == [("loop", 4)]
  per_conv = 2 * 64 * 2 * 128 * 512  # output elements x 512 contracted, one tap each
  assert stats.matmul_flops == 4 * 2 * per_conv


def test_loop_trip_count_starts_where_its_counter_starts():
  """``i`` from 3 to ``i < 8`` by 2: trips 3, 5, 7."""
  text = WINDOWED.replace("%zero = u32[] constant(0)", "%zero = u32[] constant(3)")
  assert hlo_stats.analyze(text).loops == [("loop", 3)]
