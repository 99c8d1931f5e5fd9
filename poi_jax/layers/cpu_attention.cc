// Scaled dot-product attention for XLA's CPU backend: forward and backward as XLA FFI handlers.
//
// Why: XLA's CPU backend runs attention as whole-array passes over the (B, N, Lq, Lk) scores
// (batched matmuls, then softmax, then more matmuls), which leaves the scores in memory between
// passes; PyTorch's CPU kernel works on a block of queries at a time with the block's scores in
// cache. This kernel does the same: per (batch, head), per block of BQ queries, the block's
// scores, softmax and products stay in a thread's scratch (BQ x Lk floats), and the heads are
// read in place from the projections' (B, L, N, D) layout (no transposes in the graph).
//
// Forward: out = softmax(q k^T / sqrt(D) + bias) v, and each query's max score and 1 / sum(exp)
//          (kept for the backward, as flash attention keeps their log-sum-exp: two numbers, not
//          one, because a padded row's max is -3.4e38, which would absorb log(sum)).
// Backward: P recomputed from them; dP = dO v^T; dS = P * (dP - rowsum(dO * out)) / sqrt(D);
//           dq = dS k, dk = dS^T q, dv = P^T dO.
// Dropout on the probabilities (rate > 0): out = (P * M) v with M = keep / (1 - rate); the keep
//          mask is drawn here, per element, from a counter-based hash of (seed, pair, query, key)
//          (`Dropout`), in the forward and again in the backward, so it is never stored;
//          dP = M * (dO v^T), dv = (P * M)^T dO, and rowsum(dO * out) = rowsum(P * dP) still.
// Padding: the keys after a row's last key whose bias is above the lowest float (the mask's
//          value) are left out (`keys_in_use`): their exp(score + bias - max) is 0 exactly, in
//          the forward and the backward, so a padded window costs its real length. The rows'
//          loops run whole vectors past the last key in use, over a bias padded with -inf
//          (`padded_bias`): a scalar tail of expf per row cost a third of the forward.
// float32, and a bfloat16 variant on AMX tiles where the CPU has them (`amx`, below); bias is
// additive over keys, (B, Lk). Work is split over (batch, head) pairs on
// XLA's intra-op thread pool; dk and dv accumulate per pair, so no two threads write the same
// rows.
//
// Portable C++17 with GCC/Clang vector extensions, one vector per register of the machine it is
// built for (-march=native): 16 floats with AVX-512, 8 with AVX/AVX2, 4 elsewhere (NEON, SSE).
// The register tiles of the products are sized to that register file (`TILE_ROWS`,
// `TILE_COLS`): 16-float vectors on an AVX2 machine (two registers each) made AVX-512's 4 x 4
// tiles spill, and the kernel ran 6.8x slower than XLA's ops (explicit_vjp) on a 2-core AMD EPYC
// without AVX-512 (issue 51). Built on first use by poi_jax/layers/cpu_attention.py;
// POI_VEC_WIDTH / POI_TILE_ROWS / POI_TILE_COLS override the choice (tests build every width on
// any machine).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#if defined(__AMX_BF16__) && defined(__AVX512BF16__)
// The bfloat16 variant on AMX tiles (`amx` below): built where -march=native enables them.
#define POI_ATTENTION_AMX 1
#include "amx_tiles.h"
#endif

#include "native_parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using poi_jax_native::parallel_for;

namespace {

#ifndef POI_VEC_WIDTH
#if defined(__AVX512F__)
#define POI_VEC_WIDTH 16
#elif defined(__AVX__)
#define POI_VEC_WIDTH 8
#else
#define POI_VEC_WIDTH 4
#endif
#endif
// The register tiles of the products: TILE_ROWS rows x TILE_COLS vectors of accumulators, plus
// the tile's loaded vectors and one broadcast, must fit the register file, or the compiler folds
// the loads into the FMAs (one load per FMA) or spills. 32 zmm with AVX-512: 4 x 4 (16 + 4 + 1).
// 16 registers (AVX2, SSE): 6 x 2 (12 + 2 + 1), the tile of BLIS's Haswell kernel; 4 x 3
// (12 + 3 + 1) left no register for the broadcast, so GCC folded the loads into the FMAs and its
// products ran at ~45 GFLOP/s on one core of a 2-core AMD EPYC without AVX-512, 6 x 2's at ~85.
// One layer's attention forward + backward there (`python bench/cpu_pieces.py
// --pieces=attention`, 2 threads): 8 x 256 x 12 heads of 32, 48.5 -> 39.9 ms (PyTorch SDPA
// 32-44); 8 x 384 x 12 heads of 64, 195 -> 118 ms (SDPA 122-182). 32 NEON registers: 4 x 4.
#ifndef POI_TILE_ROWS
#if POI_VEC_WIDTH == 16 || defined(__aarch64__)
#define POI_TILE_ROWS 4
#else
#define POI_TILE_ROWS 6
#endif
#endif
#ifndef POI_TILE_COLS
#define POI_TILE_COLS (POI_TILE_ROWS == 6 ? 2 : 4)
#endif

constexpr int W = POI_VEC_WIDTH;        // floats per vector
constexpr int TILE_ROWS = POI_TILE_ROWS;
constexpr int TILE_COLS = POI_TILE_COLS;
constexpr int PAD = 16;  // D and Lk padded to a multiple of 16 floats, whatever W (16 x 16 blocks
                         // in `transpose_rows`)
static_assert(W == 4 || W == 8 || W == 16, "POI_VEC_WIDTH must be 4, 8 or 16");
static_assert(TILE_ROWS >= 1 && TILE_ROWS <= 8, "POI_TILE_ROWS must be 1 to 8");
static_assert(TILE_COLS >= 1 && TILE_COLS <= 8, "POI_TILE_COLS must be 1 to 8");
typedef float vf __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));
// Queries per block: BQ x Lk scores stay in L2 up to Lk of a few thousand; a multiple of the
// tile's rows.
constexpr int BQ = TILE_ROWS == 6 ? 36 : 32;

inline vf ld(const float* p) { vf v; std::memcpy(&v, p, sizeof(v)); return v; }
inline void st(float* p, vf v) { std::memcpy(p, &v, sizeof(v)); }
inline vf splat(float x) { return vf{} + x; }

// exp over a vector (Cephes' expf: exp(x) = 2^n exp(r), |r| <= ln2/2, degree-5 polynomial;
// ~1 ulp). Inputs below -87.3 give 0, as float32 exp underflows there.
inline vf vexp(vf x) {
  const vi underflow = x < -87.3365447505531f;
  x = x > 88.3762626647949f ? splat(88.3762626647949f) : x;
  x = x < -87.3365447505531f ? splat(-87.3365447505531f) : x;
  const vf fx = x * 1.44269504088896341f + 0.5f;
  vf n = __builtin_convertvector(__builtin_convertvector(fx, vi), vf);
  n = n > fx ? n - 1.0f : n;  // floor(x / ln2 + 1/2)
  const vf r = x - n * 0.693359375f + n * 2.12194440e-4f;  // x - n ln2, ln2 in two parts
  vf y = splat(1.9875691500e-4f);
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  const vi two_n = (__builtin_convertvector(n, vi) + 127) << 23;  // 2^n as float bits
  vi bits;
  std::memcpy(&bits, &y, sizeof(bits));
  vf two_n_f;
  std::memcpy(&two_n_f, &two_n, sizeof(two_n_f));
  y = y * two_n_f;
  std::memcpy(&bits, &y, sizeof(bits));
  bits &= ~underflow;
  std::memcpy(&y, &bits, sizeof(y));
  return y;
}

inline float hmax(vf v) { float m = v[0]; for (int i = 1; i < W; ++i) m = std::max(m, v[i]); return m; }
inline float hsum(vf v) { float s = 0.f; for (int i = 0; i < W; ++i) s += v[i]; return s; }

// ---- Dropout ----------------------------------------------------------------------------------

typedef uint32_t vu __attribute__((vector_size(W * 4)));

// A 32-bit integer hash with full avalanche (the "lowbias32" mixer: xor-shift, multiply,
// xor-shift, multiply, xor-shift), the same in scalar and vector form.
inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
  return x;
}
inline vu mix32(vu x) {
  x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
  return x;
}

// Attention dropout's keep mask as a function, not an array: element (pair bh, query i, key j)
// is kept when mix32(row + j * golden) >= threshold, with row = mix32(seed0 ^ mix32(seed1 +
// bh * Lq + i)) and threshold = rate * 2^32 (P(keep) = 1 - rate to 2^-32); kept elements are
// scaled by 1 / (1 - rate). The forward and the backward draw the same bits from the same seed,
// so the mask costs a few integer operations per score and no memory.
struct Dropout {
  uint32_t seed0 = 0, seed1 = 0;
  uint32_t threshold = 0;
  float scale = 1.f;
  bool on = false;
};

Dropout dropout_of(const uint32_t* seed, float rate) {
  Dropout dr;
  if (!(rate > 0.f)) return dr;
  dr.on = true;
  dr.seed0 = seed[0];
  dr.seed1 = seed[1];
  const double t = std::ldexp(static_cast<double>(rate), 32);
  dr.threshold = t >= 4294967295.0 ? 0xffffffffU : static_cast<uint32_t>(t);
  dr.scale = rate < 1.f ? 1.0f / (1.0f - rate) : 0.f;
  return dr;
}

uint32_t row_key(const Dropout& dr, int64_t bh, int64_t Lq, int64_t i) {
  return mix32(dr.seed0 ^ mix32(dr.seed1 + static_cast<uint32_t>(bh * Lq + i)));
}

// m[j] = the dropout's factor of key j (0 dropped, 1 / (1 - rate) kept), j < n.
void dropout_row(const Dropout& dr, uint32_t row, int64_t n, float* m) {
  constexpr uint32_t kGolden = 0x9e3779b9U;
  vu lanes;
  for (int t = 0; t < W; ++t) lanes[t] = static_cast<uint32_t>(t);
  const vf scale = splat(dr.scale);
  vi scale_bits;
  std::memcpy(&scale_bits, &scale, sizeof(scale_bits));
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    const vu x = mix32(row + (lanes + static_cast<uint32_t>(j)) * kGolden);
    const vi keep = x >= dr.threshold;  // all ones where kept
    const vi bits = scale_bits & keep;
    vf f;
    std::memcpy(&f, &bits, sizeof(f));
    st(m + j, f);
  }
  for (; j < n; ++j) {
    const uint32_t x = mix32(row + static_cast<uint32_t>(j) * kGolden);
    m[j] = x >= dr.threshold ? dr.scale : 0.f;
  }
}

// ---- Register-blocked products (all sizes of the accumulator tiles are compile-time) ----------
// The operands are packed: rows of Dp floats (Dp a multiple of W, zero padded) and score rows of
// Lkp floats (Lkp a multiple of W).

// S[r][j] = sum_d A[r][d] * BT[d][j] for RN rows and CN vectors of columns.
template <int RN, int CN>
inline void tile_abt(const float* A, const float* BT, int Dp, int Lkp, float* S) {
  vf acc[RN][CN] = {};
  for (int d = 0; d < Dp; ++d) {
    vf b[CN];
    for (int c = 0; c < CN; ++c) b[c] = ld(BT + (int64_t)d * Lkp + c * W);
    for (int r = 0; r < RN; ++r) {
      // A scalar times a vector compiles to one broadcast; `splat` would add -0.0 first (an FP
      // add on the products' critical path, without -ffast-math).
      const float a = A[r * Dp + d];
      for (int c = 0; c < CN; ++c) acc[r][c] += a * b[c];
    }
  }
  for (int r = 0; r < RN; ++r)
    for (int c = 0; c < CN; ++c) st(S + (int64_t)r * Lkp + c * W, acc[r][c]);
}

// One tile of the `left` (< N) rows or vectors at the end, its size a compile-time constant.
template <int N, typename Tile>
inline void last_tile(int left, int at, Tile&& tile) {
  if constexpr (N > 0) {
    if (left == N) return tile(std::integral_constant<int, N>{}, at);
    last_tile<N - 1>(left, at, tile);
  }
}

// Calls rows(std::integral_constant<int, RN>, r) for the rows [0, n): tiles of TILE_ROWS rows,
// then one of the 1 to TILE_ROWS - 1 left.
template <typename Rows>
inline void over_row_tiles(int n, Rows&& rows) {
  int r = 0;
  for (; r + TILE_ROWS <= n; r += TILE_ROWS) rows(std::integral_constant<int, TILE_ROWS>{}, r);
  last_tile<TILE_ROWS - 1>(n - r, r, rows);
}

// Calls tile(std::integral_constant<int, CN>, c) for the columns [0, n) (n a multiple of W):
// tiles of TILE_COLS vectors, then one of the 1 to TILE_COLS - 1 left, so that every tile's
// width is a compile-time constant.
template <typename Tile>
inline void over_column_tiles(int n, Tile&& tile) {
  int c = 0;
  for (; c + TILE_COLS * W <= n; c += TILE_COLS * W)
    tile(std::integral_constant<int, TILE_COLS>{}, c);
  last_tile<TILE_COLS - 1>((n - c) / W, c, tile);
}

template <int RN>
inline void row_abt(const float* A, const float* BT, int Dp, int Lkp, float* S) {
  over_column_tiles(Lkp, [&](auto cn, int j) {
    tile_abt<RN, decltype(cn)::value>(A, BT + j, Dp, Lkp, S + j);
  });
}

// S (R x Lkp) = A (R x Dp) @ BT (Dp x Lkp).
void mat_abt(const float* A, int R, const float* BT, int Dp, int Lkp, float* S) {
  over_row_tiles(R, [&](auto rn, int r) {
    row_abt<decltype(rn)::value>(A + r * Dp, BT, Dp, Lkp, S + (int64_t)r * Lkp);
  });
}

// O[r][:] = sum_j P[r][j] * V[j][:] for RN rows and CN vectors of O's columns.
template <int RN, int CN>
inline void tile_pv(const float* P, const float* V, int Lk, int Lkp, int Dp, float* O) {
  vf acc[RN][CN] = {};
  for (int j = 0; j < Lk; ++j) {
    vf v[CN];
    for (int c = 0; c < CN; ++c) v[c] = ld(V + (int64_t)j * Dp + c * W);
    for (int r = 0; r < RN; ++r) {
      const float p = P[(int64_t)r * Lkp + j];
      for (int c = 0; c < CN; ++c) acc[r][c] += p * v[c];
    }
  }
  for (int r = 0; r < RN; ++r)
    for (int c = 0; c < CN; ++c) st(O + (int64_t)r * Dp + c * W, acc[r][c]);
}

template <int RN>
inline void row_pv(const float* P, const float* V, int Lk, int Lkp, int Dp, float* O) {
  over_column_tiles(Dp, [&](auto cn, int c) {
    tile_pv<RN, decltype(cn)::value>(P, V + c, Lk, Lkp, Dp, O + c);
  });
}

// O (R x Dp) = P (R x Lk, row stride Lkp) @ V (Lk x Dp).
void mat_pv(const float* P, int R, const float* V, int Lk, int Lkp, int Dp, float* O) {
  over_row_tiles(R, [&](auto rn, int r) {
    row_pv<decltype(rn)::value>(P + (int64_t)r * Lkp, V, Lk, Lkp, Dp, O + r * Dp);
  });
}

// G[j][:] += sum_r P[r][j] * X[r][:] for JN rows of G and CN vectors of its columns.
template <int JN, int CN>
inline void tile_ptx(const float* P, int R, const float* X, int Lkp, int Dp, float* G) {
  vf acc[JN][CN];
  for (int j = 0; j < JN; ++j)
    for (int c = 0; c < CN; ++c) acc[j][c] = ld(G + (int64_t)j * Dp + c * W);
  for (int r = 0; r < R; ++r) {
    vf x[CN];
    for (int c = 0; c < CN; ++c) x[c] = ld(X + (int64_t)r * Dp + c * W);
    for (int j = 0; j < JN; ++j) {
      const float p = P[(int64_t)r * Lkp + j];
      for (int c = 0; c < CN; ++c) acc[j][c] += p * x[c];
    }
  }
  for (int j = 0; j < JN; ++j)
    for (int c = 0; c < CN; ++c) st(G + (int64_t)j * Dp + c * W, acc[j][c]);
}

template <int JN>
inline void row_ptx(const float* P, int R, const float* X, int Lkp, int Dp, float* G) {
  over_column_tiles(Dp, [&](auto cn, int c) {
    tile_ptx<JN, decltype(cn)::value>(P, R, X + c, Lkp, Dp, G + c);
  });
}

// G (Lk x Dp) += P^T (Lk x R; P is R x Lk, row stride Lkp) @ X (R x Dp).
void mat_ptx_acc(const float* P, int R, const float* X, int Lk, int Lkp, int Dp, float* G) {
  over_row_tiles(Lk, [&](auto jn, int j) {
    row_ptx<decltype(jn)::value>(P + j, R, X, Lkp, Dp, G + (int64_t)j * Dp);
  });
}

// ---- Layout ---------------------------------------------------------------------------------

struct Dims {
  int64_t B, Lq, Lk, N, D;
  int Dp, Lkp;  // D and Lk rounded up to a multiple of PAD (so of W)
};

Dims dims_of(const ffi::Buffer<ffi::F32>& q, const ffi::Buffer<ffi::F32>& k) {
  auto qd = q.dimensions();
  auto kd = k.dimensions();
  Dims d{qd[0], qd[1], kd[1], qd[2], qd[3], 0, 0};
  d.Dp = static_cast<int>((d.D + PAD - 1) / PAD * PAD);
  d.Lkp = static_cast<int>((d.Lk + PAD - 1) / PAD * PAD);
  return d;
}

constexpr float kLowest = -3.4028234663852886e38f;  // the mask's bias (jnp.finfo(float32).min)

// `d` with Lk cut to the keys one batch row attends to: up to its last key whose bias is above
// kLowest. Past it every score + bias is kLowest (a score is far below the lowest float's
// rounding step), so exp(x - max) is 0 there: no probability, no dv or dk row, no dq term, and
// the row's max and sum are the same without them. A row whose every key has kLowest keeps
// them all (the softmax over all keys, uniform, as the reference's).
Dims keys_in_use(const Dims& d, const float* bias_b) {
  int64_t n = d.Lk;
  while (n > 0 && bias_b[n - 1] <= kLowest) --n;
  if (n == 0 || n == d.Lk) return d;
  Dims e = d;
  e.Lk = n;
  e.Lkp = static_cast<int>((n + PAD - 1) / PAD * PAD);
  return e;
}

// Rows [i0, i0 + rows) of head h of batch b of a (B, L, N, D) array -> rows x Dp, zero padded,
// times s.
void gather(const float* x, const Dims& d, int64_t L, int64_t b, int64_t h, int64_t i0,
            int64_t rows, float s, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + ((b * L + i0 + r) * d.N + h) * d.D;
    float* o = out + r * d.Dp;
    for (int64_t c = 0; c < d.D; ++c) o[c] = src[c] * s;
    for (int64_t c = d.D; c < d.Dp; ++c) o[c] = 0.f;
  }
}

// The inverse of `gather` for rows x D (the padding dropped).
void scatter(const float* in, const Dims& d, int64_t L, int64_t b, int64_t h, int64_t i0,
             int64_t rows, float s, float* x) {
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = x + ((b * L + i0 + r) * d.N + h) * d.D;
    const float* src = in + r * d.Dp;
    for (int64_t c = 0; c < d.D; ++c) dst[c] = src[c] * s;
  }
}

// rows (Lk x Dp, packed by `gather`) -> Dp x Lkp, transposed and zero padded, 16 x 16 blocks at
// a time (both sides stay in cache: gathering straight from the strided (B, L, N, D) array into
// columns was 5-10% of the backward, in cache misses).
void transpose_rows(const float* rows, const Dims& d, float* out) {
  constexpr int T = PAD;
  for (int64_t j0 = 0; j0 < d.Lkp; j0 += T) {
    const int64_t jn = std::min<int64_t>(T, d.Lk - j0);
    for (int64_t c0 = 0; c0 < d.Dp; c0 += T) {
      for (int64_t c = c0; c < c0 + T; ++c) {
        float* o = out + c * d.Lkp + j0;
        int64_t j = 0;
        for (; j < jn; ++j) o[j] = rows[(j0 + j) * d.Dp + c];
        for (; j < T; ++j) o[j] = 0.f;
      }
    }
  }
}

// A thread's scratch, reused across calls (grown when a call needs more), aligned to 64 bytes:
// every packed row then starts on a cache line (Dp and Lkp are multiples of 16 floats), so no
// vector load straddles two lines, as with malloc's 16-byte alignment it could.
float* scratch(std::vector<float>& buf, int64_t size) {
  constexpr int64_t kAlign = 16;  // floats
  if ((int64_t)buf.size() < size + kAlign) buf.resize(size + kAlign);
  const auto at = reinterpret_cast<std::uintptr_t>(buf.data());
  return buf.data() + ((kAlign * 4 - at % (kAlign * 4)) % (kAlign * 4)) / 4;
}

// ---- Forward ----------------------------------------------------------------------------------

// The bias of one batch row over the keys in use, padded to Lkp with -inf: the rows' loops then
// run whole vectors to the end (a padded key's exp is 0, and it never is the max; -inf, not the
// mask's lowest float, so that in a row whose keys are all masked the padding still gets 0).
void padded_bias(const float* bias_b, const Dims& e, float* out) {
  std::memcpy(out, bias_b, e.Lk * sizeof(float));
  std::fill(out + e.Lk, out + e.Lkp, -INFINITY);
}

// The keys a row's vector loops cover: e.Lk rounded up to whole vectors (within Lkp).
inline int64_t vector_keys(const Dims& e) { return (e.Lk + W - 1) / W * W; }

// What each per-pair function (forward and backward, float32 and AMX) starts from: the softmax
// scale, the pair's batch row and head, that row's bias and the keys it uses.
struct Pair {
  float scale;
  int64_t b, h;
  const float* bias_b;
  Dims e;
};

Pair pair_of(const Dims& d, const float* bias, int64_t bh) {
  const int64_t b = bh / d.N;
  const float* bias_b = bias + b * d.Lk;
  return {1.0f / std::sqrt(static_cast<float>(d.D)), b, bh % d.N, bias_b, keys_in_use(d, bias_b)};
}

// The forward of one (batch, head) pair `bh`: its rows of O, MAX and INV.
void forward_head(const Dims& d, const float* Q, const float* K, const float* V,
                  const float* bias_, const Dropout& dr, float* O, float* MAX, float* INV,
                  int64_t bh) {
  // (the buffers are laid out for d's keys, the most; e has those in use)
  const auto [scale, b, h, bias_b, e] = pair_of(d, bias_, bh);
  const int64_t Dp = d.Dp, Lkp = d.Lkp;
  thread_local std::vector<float> buf;
  float* kt = scratch(buf, Dp * Lkp * 3 + BQ * Dp * 2 + BQ * Lkp + Lkp * 2);
  float* vp = kt + Dp * Lkp;
  float* qb = vp + Lkp * Dp;
  float* ob = qb + BQ * Dp;
  float* s = ob + BQ * Dp;
  float* kp = s + BQ * Lkp;
  float* mrow = kp + Lkp * Dp;  // the dropout's factors for one query's keys
  float* bias = mrow + Lkp;
  padded_bias(bias_b, e, bias);
  const int64_t n = vector_keys(e);
  gather(K, e, d.Lk, b, h, 0, e.Lk, 1.f, kp);
  transpose_rows(kp, e, kt);
  gather(V, e, d.Lk, b, h, 0, e.Lk, 1.f, vp);
  for (int64_t i0 = 0; i0 < d.Lq; i0 += BQ) {
    const int R = static_cast<int>(std::min<int64_t>(BQ, d.Lq - i0));
    float inv[BQ];  // 1 / sum(e) per query: the softmax's normalisation, applied after e @ v
    gather(Q, d, d.Lq, b, h, i0, R, scale, qb);  // q / sqrt(D)
    mat_abt(qb, R, kt, e.Dp, e.Lkp, s);
    for (int r = 0; r < R; ++r) {  // whole vectors to n (the padding's bias is -inf: exp 0)
      float* sr = s + (int64_t)r * e.Lkp;
      vf m = splat(-INFINITY);
      for (int64_t j = 0; j < n; j += W) {
        vf x = ld(sr + j) + ld(bias + j);
        st(sr + j, x);
        m = x > m ? x : m;
      }
      const float mx = hmax(m);
      vf acc = {};
      for (int64_t j = 0; j < n; j += W) {
        vf ex = vexp(ld(sr + j) - mx);
        st(sr + j, ex);
        acc += ex;
      }
      inv[r] = 1.0f / hsum(acc);
      if (dr.on) {  // after the sum: the softmax normalises over every key, dropped or not
        dropout_row(dr, row_key(dr, bh, d.Lq, i0 + r), n, mrow);
        for (int64_t j = 0; j < n; j += W) st(sr + j, ld(sr + j) * ld(mrow + j));
      }
      MAX[bh * d.Lq + i0 + r] = mx;
      INV[bh * d.Lq + i0 + r] = inv[r];
    }
    mat_pv(s, R, vp, static_cast<int>(e.Lk), e.Lkp, e.Dp, ob);  // unnormalised: e @ v
    for (int r = 0; r < R; ++r) scatter(ob + r * Dp, d, d.Lq, b, h, i0 + r, 1, inv[r], O);
  }
}

// ---- Backward ---------------------------------------------------------------------------------

// The backward of one (batch, head) pair `bh`: its rows of DQ, DK and DV.
void backward_head(const Dims& d, const float* Q, const float* K, const float* V,
                   const float* bias_, const Dropout& dr, const float* O, const float* MAX,
                   const float* INV, const float* DO, float* DQ, float* DK, float* DV,
                   int64_t bh) {
  // (the buffers are laid out for d's keys, the most; e has those in use)
  const auto [scale, b, h, bias_b, e] = pair_of(d, bias_, bh);
  const int64_t Dp = d.Dp, Lkp = d.Lkp;
  thread_local std::vector<float> buf;
  float* kt = scratch(buf, Dp * Lkp * 5 + BQ * Dp * 4 + BQ * Lkp * 2 + Lkp * 2);
  float* vt = kt + Dp * Lkp;
  float* kp = vt + Dp * Lkp;
  float* dka = kp + Lkp * Dp;
  float* dva = dka + Lkp * Dp;
  float* qb = dva + Lkp * Dp;
  float* dob = qb + BQ * Dp;
  float* ob = dob + BQ * Dp;
  float* dqb = ob + BQ * Dp;
  float* p = dqb + BQ * Dp;
  float* ds = p + BQ * Lkp;
  float* mrow = ds + BQ * Lkp;  // the dropout's factors for one query's keys
  float* bias = mrow + Lkp;
  padded_bias(bias_b, e, bias);
  const int64_t n = vector_keys(e);
  gather(K, e, d.Lk, b, h, 0, e.Lk, 1.f, kp);
  transpose_rows(kp, e, kt);
  gather(V, e, d.Lk, b, h, 0, e.Lk, 1.f, dva);  // v's rows, in dva until the loop needs it
  transpose_rows(dva, e, vt);
  std::fill(dka, dka + Lkp * Dp * 2, 0.f);  // dka and dva: the left-out keys' rows stay 0
  for (int64_t i0 = 0; i0 < d.Lq; i0 += BQ) {
    const int R = static_cast<int>(std::min<int64_t>(BQ, d.Lq - i0));
    gather(Q, d, d.Lq, b, h, i0, R, scale, qb);  // q / sqrt(D)
    gather(DO, d, d.Lq, b, h, i0, R, 1.f, dob);
    gather(O, d, d.Lq, b, h, i0, R, 1.f, ob);
    mat_abt(qb, R, kt, e.Dp, e.Lkp, p);   // scores
    mat_abt(dob, R, vt, e.Dp, e.Lkp, ds);  // dP = dO v^T
    for (int r = 0; r < R; ++r) {
      float* pr = p + (int64_t)r * e.Lkp;
      float* dsr = ds + (int64_t)r * e.Lkp;
      const float mx = MAX[bh * d.Lq + i0 + r];
      const vf inv = splat(INV[bh * d.Lq + i0 + r]);
      float row = 0.f;  // rowsum(dO * out) = rowsum(P * dP)
      for (int64_t c = 0; c < d.D; ++c) row += dob[r * Dp + c] * ob[r * Dp + c];
      // Whole vectors to n: a padded key's P is 0, so its dS is 0.
      if (!dr.on) {
        for (int64_t j = 0; j < n; j += W) {
          vf pj = vexp(ld(pr + j) + ld(bias + j) - mx) * inv;
          st(pr + j, pj);
          st(dsr + j, pj * (ld(dsr + j) - row));
        }
        continue;
      }
      // With dropout: dP = M * (dO v^T), dS = P * (dP - row), and dv takes P * M.
      dropout_row(dr, row_key(dr, bh, d.Lq, i0 + r), n, mrow);
      for (int64_t j = 0; j < n; j += W) {
        vf pj = vexp(ld(pr + j) + ld(bias + j) - mx) * inv;
        vf mj = ld(mrow + j);
        st(pr + j, pj * mj);
        st(dsr + j, pj * (ld(dsr + j) * mj - row));
      }
    }
    const int Lk = static_cast<int>(e.Lk);
    mat_ptx_acc(p, R, dob, Lk, e.Lkp, e.Dp, dva);  // dv += P^T dO (P * M with dropout)
    mat_pv(ds, R, kp, Lk, e.Lkp, e.Dp, dqb);      // dq = dS k (times 1/sqrt(D) below)
    mat_ptx_acc(ds, R, qb, Lk, e.Lkp, e.Dp, dka);  // dk += dS^T (q / sqrt(D))
    scatter(dqb, d, d.Lq, b, h, i0, R, scale, DQ);
  }
  scatter(dka, d, d.Lk, b, h, 0, d.Lk, 1.f, DK);
  scatter(dva, d, d.Lk, b, h, 0, d.Lk, 1.f, DV);
}

// ---- bfloat16 products on AMX tiles ---------------------------------------------------------
// The same forward and backward with each of the five products' operands rounded to bfloat16
// (q, k, v, dO, the unnormalised probabilities e (P in the backward) and dS) and their sums in
// float32 on AMX tiles (TDPBF16PS: a product of two bfloat16 numbers is exact in float32): what
// `jax_default_matmul_precision=bfloat16` asks of a dot, and what PyTorch's CPU flash attention
// does under bfloat16 autocast (it keeps e in bfloat16 for e @ v). The softmax, its row maxima
// and sums, dropout and rowsum(dO * out) stay in float32, as do the scale 1 / sqrt(D) (applied
// to the float32 scores and gradients, not to a rounded q) and the results.
//
// A tile holds 16 rows of 64 bytes; TDPBF16PS multiplies A (16 x 32 bfloat16, row-major) by B
// (16 rows of 16 columns x 2: "VNNI", each row holding the (k, k + 1) pair of every column) into
// a 16 x 16 float32 tile. `gemm` works in 32 x 32 blocks of C (four accumulators), K in steps of
// 32; every size here is padded to a multiple of 32 with zeros (D, the keys in use, the block
// of BQ = 32 queries). Per (batch, head) pair the B operands made from k and v are packed once;
// per block of queries the rest. The transposed products (dv = P^T dO, dk = dS^T q) are
// computed transposed (dv^T = dO^T P, dk^T = q^T dS), so that P and dS are the packed B
// operands, written in VNNI order straight from the softmax's rows.
#ifdef POI_ATTENTION_AMX
namespace amx {

constexpr int64_t T = 32;  // block rows, columns and K step

inline int64_t up(int64_t x) { return (x + T - 1) / T * T; }

typedef float f16v __attribute__((vector_size(64)));
typedef uint32_t u16v __attribute__((vector_size(64)));
typedef uint16_t h16v __attribute__((vector_size(32)));

// Sixteen floats rounded to bfloat16 (to nearest, ties to even; the bits in the high halves).
inline u16v rounded(f16v x) {
  u16v b;
  std::memcpy(&b, &x, sizeof(b));
  return (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
}
inline uint16_t rounded(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
inline f16v ld16(const float* p) { f16v v; std::memcpy(&v, p, sizeof(v)); return v; }

// rows x cols floats (row stride ld) -> bfloat16 rows x cols (row stride ldo), cols a multiple
// of 16 (the caller zeroes what it pads).
void to_bf16(const float* in, int64_t ld, int64_t rows, int64_t cols, uint16_t* out,
             int64_t ldo) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += 16) {
      const h16v h = __builtin_convertvector(rounded(ld16(in + r * ld + c)) >> 16, h16v);
      std::memcpy(out + r * ldo + c, &h, sizeof(h));
    }
  }
}

// B (K x N, K and N multiples of 32) from rows of floats, B[k][n] = in[k * ld + n] for k < rows
// (zero beyond), packed: per 16 columns, K / 2 rows of 16 (k, k + 1) pairs. `in` has N columns.
void pack_rows(const float* in, int64_t ld, int64_t rows, int64_t K, int64_t N, uint16_t* out) {
  uint32_t* o = reinterpret_cast<uint32_t*>(out);
  for (int64_t kp = 0; kp < K / 2; ++kp) {
    const int64_t k0 = 2 * kp, k1 = k0 + 1;
    for (int64_t n = 0; n < N; n += 16) {
      const u16v lo = k0 < rows ? rounded(ld16(in + k0 * ld + n)) >> 16 : u16v{};
      const u16v hi = k1 < rows ? rounded(ld16(in + k1 * ld + n)) : u16v{};
      const u16v pair = lo | hi;
      std::memcpy(o + ((n / 16) * (K / 2) + kp) * 16, &pair, sizeof(pair));
    }
  }
}

// The same B from its transpose: B[k][n] = in[n * ld + k] for n < rows (zero beyond); `in` has
// K columns (zero padded).
void pack_columns(const float* in, int64_t ld, int64_t rows, int64_t K, int64_t N,
                  uint16_t* out) {
  uint32_t* o = reinterpret_cast<uint32_t*>(out);
  for (int64_t n = 0; n < N; ++n) {
    uint32_t* column = o + (n / 16) * (K / 2) * 16 + n % 16;
    if (n >= rows) {
      for (int64_t kp = 0; kp < K / 2; ++kp) column[kp * 16] = 0;
      continue;
    }
    const float* row = in + n * ld;
    for (int64_t kp = 0; kp < K / 2; ++kp) {
      column[kp * 16] = rounded(row[2 * kp]) | static_cast<uint32_t>(rounded(row[2 * kp + 1])) << 16;
    }
  }
}

// out (cols x rows bfloat16, row stride ldo) = the transpose of in (rows x cols floats).
void transposed_bf16(const float* in, int64_t ld, int64_t rows, int64_t cols, uint16_t* out,
                     int64_t ldo) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * ldo + r] = rounded(in[r * ld + c]);
}

// C (M x N floats, row stride ldc) = A (M x K bfloat16, row stride lda) @ B (packed), or += with
// accumulate. M, N and K multiples of 32.
void gemm(const uint16_t* A, int64_t lda, int64_t M, int64_t K, const uint16_t* B, int64_t N,
          float* C, int64_t ldc, bool accumulate) {
  const int64_t b_half = (K / 2) * 32;  // one 16-column block of packed B, in bfloat16s
  for (int64_t m = 0; m < M; m += T) {
    const uint16_t* a = A + m * lda;
    for (int64_t n = 0; n < N; n += T) {
      float* c = C + m * ldc + n;
      if (accumulate) {
        poi_jax_native::amx_load_block(c, ldc);
      } else {
        poi_jax_native::amx_zero_block();
      }
      const uint16_t* b0 = B + (n / 16) * b_half;
      poi_jax_native::amx_multiply_block(a, lda, b0, b0 + b_half, K);
      poi_jax_native::amx_store_block(c, ldc);
    }
  }
}

// `d` with D and the keys padded to multiples of 32 (Dp, Lkp: the packed sizes here).
Dims padded(Dims d) {
  d.Dp = static_cast<int>(up(d.D));
  d.Lkp = static_cast<int>(up(d.Lk));
  return d;
}

// A thread's scratch of `floats` floats, as floats and as bfloat16s.
struct Scratch {
  float* at;
  float* f(int64_t n) { float* p = at; at += (n + 15) / 16 * 16; return p; }
  uint16_t* h(int64_t n) { return reinterpret_cast<uint16_t*>(f((n + 1) / 2)); }
};

// Softmax row r of the block (scores s, row stride Lkp; keys [0, e.Lk) in use, `bias` padded by
// `padded_bias`): s <- e = exp(s * scale + bias - max) (times dropout's factor), zeros from
// e.Lk to Lkp; returns max and 1 / sum(e), the sum over every key in use, dropped or not.
void softmax_row(float* sr, const Dims& e, float scale, const float* bias, const Dropout& dr,
                 uint32_t row_key_, float* mrow, float* mx_out, float* inv_out) {
  const int64_t n = vector_keys(e);
  vf m = splat(-INFINITY);
  for (int64_t j = 0; j < n; j += W) {
    const vf x = ld(sr + j) * scale + ld(bias + j);
    st(sr + j, x);
    m = x > m ? x : m;
  }
  const float mx = hmax(m);
  vf acc = {};
  for (int64_t j = 0; j < n; j += W) {
    const vf ex = vexp(ld(sr + j) - mx);
    st(sr + j, ex);
    acc += ex;
  }
  if (dr.on) {  // after the sum: the softmax normalises over every key, dropped or not
    dropout_row(dr, row_key_, n, mrow);
    for (int64_t j = 0; j < n; j += W) st(sr + j, ld(sr + j) * ld(mrow + j));
  }
  std::fill(sr + n, sr + e.Lkp, 0.f);
  *mx_out = mx;
  *inv_out = 1.0f / hsum(acc);
}

void forward_head(const Dims& d0, const float* Q, const float* K, const float* V,
                  const float* bias_, const Dropout& dr, float* O, float* MAX, float* INV,
                  int64_t bh) {
  poi_jax_native::amx_configure_tiles();
  const Dims d = padded(d0);
  const auto [scale, b, h, bias_b, in_use] = pair_of(d, bias_, bh);
  const Dims e = padded(in_use);
  const int64_t Dp = d.Dp, Lkp = e.Lkp;
  thread_local std::vector<float> buf;
  Scratch sc{scratch(buf, d.Lkp * Dp * 4 + T * Dp * 3 + T * d.Lkp * 2 + d.Lkp * 2 + 256)};
  float* kf = sc.f(d.Lkp * Dp);
  float* vfl = sc.f(d.Lkp * Dp);
  uint16_t* kt = sc.h(Dp * d.Lkp);  // B of q k^T: K = D, N = keys
  uint16_t* vb = sc.h(d.Lkp * Dp);  // B of e v: K = keys, N = D
  float* qf = sc.f(T * Dp);
  uint16_t* qa = sc.h(T * Dp);
  float* s = sc.f(T * d.Lkp);
  uint16_t* ea = sc.h(T * d.Lkp);
  float* ob = sc.f(T * Dp);
  float* mrow = sc.f(d.Lkp);
  float* biasp = sc.f(d.Lkp);
  padded_bias(bias_b, e, biasp);
  gather(K, e, d.Lk, b, h, 0, e.Lk, 1.f, kf);
  gather(V, e, d.Lk, b, h, 0, e.Lk, 1.f, vfl);
  pack_columns(kf, Dp, e.Lk, Dp, Lkp, kt);
  pack_rows(vfl, Dp, e.Lk, Lkp, Dp, vb);
  for (int64_t i0 = 0; i0 < d.Lq; i0 += T) {
    const int R = static_cast<int>(std::min<int64_t>(T, d.Lq - i0));
    float inv[T];
    gather(Q, d, d.Lq, b, h, i0, R, 1.f, qf);
    std::fill(qf + R * Dp, qf + T * Dp, 0.f);
    to_bf16(qf, Dp, T, Dp, qa, Dp);
    gemm(qa, Dp, T, Dp, kt, Lkp, s, Lkp, false);
    for (int r = 0; r < R; ++r) {
      float mx;
      softmax_row(s + r * Lkp, e, scale, biasp, dr, dr.on ? row_key(dr, bh, d.Lq, i0 + r) : 0,
                  mrow, &mx, &inv[r]);
      MAX[bh * d.Lq + i0 + r] = mx;
      INV[bh * d.Lq + i0 + r] = inv[r];
    }
    std::fill(s + R * Lkp, s + T * Lkp, 0.f);
    to_bf16(s, Lkp, T, Lkp, ea, Lkp);
    gemm(ea, Lkp, T, Lkp, vb, Dp, ob, Dp, false);  // unnormalised: e @ v
    for (int r = 0; r < R; ++r) scatter(ob + r * Dp, d, d.Lq, b, h, i0 + r, 1, inv[r], O);
  }
  _tile_release();
}

void backward_head(const Dims& d0, const float* Q, const float* K, const float* V,
                   const float* bias_, const Dropout& dr, const float* O, const float* MAX,
                   const float* INV, const float* DO, float* DQ, float* DK, float* DV,
                   int64_t bh) {
  poi_jax_native::amx_configure_tiles();
  const Dims d = padded(d0);
  const auto [scale, b, h, bias_b, in_use] = pair_of(d, bias_, bh);
  const Dims e = padded(in_use);
  const int64_t Dp = d.Dp, Lkp = e.Lkp;
  thread_local std::vector<float> buf;
  Scratch sc{scratch(buf, d.Lkp * Dp * 7 + T * Dp * 7 + T * d.Lkp * 5 + d.Lkp * 2 + 512)};
  float* kf = sc.f(d.Lkp * Dp);
  float* vfl = sc.f(d.Lkp * Dp);
  uint16_t* kt = sc.h(Dp * d.Lkp);  // B of q k^T
  uint16_t* vt = sc.h(Dp * d.Lkp);  // B of dO v^T: K = D, N = keys
  uint16_t* kb = sc.h(d.Lkp * Dp);  // B of dS k: K = keys, N = D
  float* dvt = sc.f(Dp * d.Lkp);    // dv^T and dk^T (D x keys), accumulated over the blocks
  float* dkt = sc.f(Dp * d.Lkp);
  float* qf = sc.f(T * Dp);
  float* dof = sc.f(T * Dp);
  float* of = sc.f(T * Dp);
  float* dqb = sc.f(T * Dp);
  uint16_t* qa = sc.h(T * Dp);
  uint16_t* doa = sc.h(T * Dp);
  uint16_t* qta = sc.h(Dp * T);   // q^T, dO^T: A of dk^T, dv^T (D x queries)
  uint16_t* dota = sc.h(Dp * T);
  float* p = sc.f(T * d.Lkp);
  float* ds = sc.f(T * d.Lkp);
  uint16_t* pb = sc.h(T * d.Lkp);   // P and dS as B (K = queries, N = keys)
  uint16_t* dsb = sc.h(T * d.Lkp);
  uint16_t* dsa = sc.h(T * d.Lkp);  // dS as A (queries x keys)
  float* mrow = sc.f(d.Lkp);
  float* biasp = sc.f(d.Lkp);
  padded_bias(bias_b, e, biasp);
  const int64_t n = vector_keys(e);
  gather(K, e, d.Lk, b, h, 0, e.Lk, 1.f, kf);
  gather(V, e, d.Lk, b, h, 0, e.Lk, 1.f, vfl);
  pack_columns(kf, Dp, e.Lk, Dp, Lkp, kt);
  pack_columns(vfl, Dp, e.Lk, Dp, Lkp, vt);
  pack_rows(kf, Dp, e.Lk, Lkp, Dp, kb);
  std::fill(dvt, dvt + Dp * Lkp, 0.f);
  std::fill(dkt, dkt + Dp * Lkp, 0.f);
  for (int64_t i0 = 0; i0 < d.Lq; i0 += T) {
    const int R = static_cast<int>(std::min<int64_t>(T, d.Lq - i0));
    gather(Q, d, d.Lq, b, h, i0, R, 1.f, qf);
    gather(DO, d, d.Lq, b, h, i0, R, 1.f, dof);
    gather(O, d, d.Lq, b, h, i0, R, 1.f, of);
    std::fill(qf + R * Dp, qf + T * Dp, 0.f);
    std::fill(dof + R * Dp, dof + T * Dp, 0.f);
    to_bf16(qf, Dp, T, Dp, qa, Dp);
    to_bf16(dof, Dp, T, Dp, doa, Dp);
    transposed_bf16(qf, Dp, T, Dp, qta, T);
    transposed_bf16(dof, Dp, T, Dp, dota, T);
    gemm(qa, Dp, T, Dp, kt, Lkp, p, Lkp, false);    // scores / scale
    gemm(doa, Dp, T, Dp, vt, Lkp, ds, Lkp, false);  // dP = dO v^T
    for (int r = 0; r < R; ++r) {
      float* pr = p + (int64_t)r * Lkp;
      float* dsr = ds + (int64_t)r * Lkp;
      const float mx = MAX[bh * d.Lq + i0 + r];
      const vf inv = splat(INV[bh * d.Lq + i0 + r]);
      float row = 0.f;  // rowsum(dO * out) = rowsum(P * dP), from the float32 values
      for (int64_t c = 0; c < d.D; ++c) row += dof[r * Dp + c] * of[r * Dp + c];
      if (dr.on) dropout_row(dr, row_key(dr, bh, d.Lq, i0 + r), n, mrow);
      for (int64_t j = 0; j < n; j += W) {  // (a padded key: P = 0, so dS = 0)
        const vf pj = vexp(ld(pr + j) * scale + ld(biasp + j) - mx) * inv;
        const vf mj = dr.on ? ld(mrow + j) : splat(1.f);
        st(pr + j, pj * mj);
        st(dsr + j, pj * (ld(dsr + j) * mj - row));
      }
      std::fill(pr + n, pr + Lkp, 0.f);
      std::fill(dsr + n, dsr + Lkp, 0.f);
    }
    pack_rows(p, Lkp, R, T, Lkp, pb);
    pack_rows(ds, Lkp, R, T, Lkp, dsb);
    std::fill(ds + R * Lkp, ds + T * Lkp, 0.f);
    to_bf16(ds, Lkp, T, Lkp, dsa, Lkp);
    gemm(dota, T, Dp, T, pb, Lkp, dvt, Lkp, true);   // dv^T += dO^T P
    gemm(qta, T, Dp, T, dsb, Lkp, dkt, Lkp, true);   // dk^T += q^T dS (times scale below)
    gemm(dsa, Lkp, T, Lkp, kb, Dp, dqb, Dp, false);  // dq = dS k (times scale)
    scatter(dqb, d, d.Lq, b, h, i0, R, scale, DQ);
  }
  // dk, dv: the transposes of dk^T, dv^T; the keys left out (past e.Lk) get zeros.
  for (int64_t j = 0; j < d.Lk; ++j) {
    float* dkr = DK + ((b * d.Lk + j) * d.N + h) * d.D;
    float* dvr = DV + ((b * d.Lk + j) * d.N + h) * d.D;
    if (j >= e.Lk) {
      std::fill(dkr, dkr + d.D, 0.f);
      std::fill(dvr, dvr + d.D, 0.f);
      continue;
    }
    for (int64_t c = 0; c < d.D; ++c) {
      dkr[c] = dkt[c * Lkp + j] * scale;
      dvr[c] = dvt[c * Lkp + j];
    }
  }
  _tile_release();
}

}  // namespace amx

#endif  // POI_ATTENTION_AMX

// ---- The FFI handlers -------------------------------------------------------------------

// Whether the bfloat16 variant asked for can run: built (AMX-BF16) and the tiles granted.
ffi::Error bfloat16_usable(bool bfloat16) {
  if (!bfloat16) return ffi::Error::Success();
#ifdef POI_ATTENTION_AMX
  if (poi_jax_native::amx_tiles_granted()) return ffi::Error::Success();
  return ffi::Error(ffi::ErrorCode::kUnavailable,
                    "Linux did not grant this process the AMX tiles (arch_prctl)");
#else
  return ffi::Error(ffi::ErrorCode::kUnavailable,
                    "the CPU attention kernel was built without AMX-BF16: no bfloat16 variant");
#endif
}

ffi::Error Forward(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                   ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> bias,
                   ffi::Buffer<ffi::U32> seed, ffi::ResultBuffer<ffi::F32> out,
                   ffi::ResultBuffer<ffi::F32> row_max, ffi::ResultBuffer<ffi::F32> inv_sum,
                   float dropout_rate, bool bfloat16) {
  const Dims d = dims_of(q, k);
  const Dropout dr = dropout_of(seed.typed_data(), dropout_rate);
  if (ffi::Error e = bfloat16_usable(bfloat16); e.failure()) return e;
  parallel_for(pool, d.B * d.N, [&](int64_t bh) {
#ifdef POI_ATTENTION_AMX
    if (bfloat16) {
      return amx::forward_head(d, q.typed_data(), k.typed_data(), v.typed_data(),
                               bias.typed_data(), dr, out->typed_data(), row_max->typed_data(),
                               inv_sum->typed_data(), bh);
    }
#endif
    forward_head(d, q.typed_data(), k.typed_data(), v.typed_data(), bias.typed_data(), dr,
                 out->typed_data(), row_max->typed_data(), inv_sum->typed_data(), bh);
  });
  return ffi::Error::Success();
}

ffi::Error Backward(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                    ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> bias,
                    ffi::Buffer<ffi::U32> seed, ffi::Buffer<ffi::F32> out,
                    ffi::Buffer<ffi::F32> row_max, ffi::Buffer<ffi::F32> inv_sum,
                    ffi::Buffer<ffi::F32> d_out, ffi::ResultBuffer<ffi::F32> dq,
                    ffi::ResultBuffer<ffi::F32> dk, ffi::ResultBuffer<ffi::F32> dv,
                    float dropout_rate, bool bfloat16) {
  const Dims d = dims_of(q, k);
  const Dropout dr = dropout_of(seed.typed_data(), dropout_rate);
  if (ffi::Error e = bfloat16_usable(bfloat16); e.failure()) return e;
  parallel_for(pool, d.B * d.N, [&](int64_t bh) {
#ifdef POI_ATTENTION_AMX
    if (bfloat16) {
      return amx::backward_head(d, q.typed_data(), k.typed_data(), v.typed_data(),
                                bias.typed_data(), dr, out.typed_data(), row_max.typed_data(),
                                inv_sum.typed_data(), d_out.typed_data(), dq->typed_data(),
                                dk->typed_data(), dv->typed_data(), bh);
    }
#endif
    backward_head(d, q.typed_data(), k.typed_data(), v.typed_data(), bias.typed_data(), dr,
                  out.typed_data(), row_max.typed_data(), inv_sum.typed_data(),
                  d_out.typed_data(), dq->typed_data(), dk->typed_data(), dv->typed_data(), bh);
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    PoiCpuAttentionForward, Forward,
    ffi::Ffi::Bind()
        .Ctx<ffi::ThreadPool>()
        .Arg<ffi::Buffer<ffi::F32>>()  // q (B, Lq, N, D)
        .Arg<ffi::Buffer<ffi::F32>>()  // k (B, Lk, N, D)
        .Arg<ffi::Buffer<ffi::F32>>()  // v (B, Lk, N, D)
        .Arg<ffi::Buffer<ffi::F32>>()  // bias (B, Lk)
        .Arg<ffi::Buffer<ffi::U32>>()  // seed (2,): the dropout's
        .Ret<ffi::Buffer<ffi::F32>>()  // out (B, Lq, N, D)
        .Ret<ffi::Buffer<ffi::F32>>()  // row_max (B, N, Lq)
        .Ret<ffi::Buffer<ffi::F32>>()  // inv_sum (B, N, Lq)
        .Attr<float>("dropout_rate")
        .Attr<bool>("bfloat16")  // the variant on AMX tiles (built where the CPU has them)
);

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    PoiCpuAttentionBackward, Backward,
    ffi::Ffi::Bind()
        .Ctx<ffi::ThreadPool>()
        .Arg<ffi::Buffer<ffi::F32>>()  // q
        .Arg<ffi::Buffer<ffi::F32>>()  // k
        .Arg<ffi::Buffer<ffi::F32>>()  // v
        .Arg<ffi::Buffer<ffi::F32>>()  // bias
        .Arg<ffi::Buffer<ffi::U32>>()  // seed
        .Arg<ffi::Buffer<ffi::F32>>()  // out
        .Arg<ffi::Buffer<ffi::F32>>()  // row_max
        .Arg<ffi::Buffer<ffi::F32>>()  // inv_sum
        .Arg<ffi::Buffer<ffi::F32>>()  // d_out
        .Ret<ffi::Buffer<ffi::F32>>()  // dq
        .Ret<ffi::Buffer<ffi::F32>>()  // dk
        .Ret<ffi::Buffer<ffi::F32>>()  // dv
        .Attr<float>("dropout_rate")
        .Attr<bool>("bfloat16")
);

#ifdef POI_ATTENTION_AMX
// Whether Linux granted this process the AMX tiles (asks once); Python checks it when loading.
extern "C" int PoiCpuAttentionAmxTilesGranted() {
  return poi_jax_native::amx_tiles_granted() ? 1 : 0;
}

#endif  // POI_ATTENTION_AMX
