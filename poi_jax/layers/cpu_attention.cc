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
//          the forward and the backward, so a padded window costs its real length.
// float32 only; bias is additive over keys, (B, Lk). Work is split over (batch, head) pairs on
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

// The forward of one (batch, head) pair `bh`: its rows of O, MAX and INV.
void forward_head(const Dims& d, const float* Q, const float* K, const float* V,
                  const float* bias_, const Dropout& dr, float* O, float* MAX, float* INV,
                  int64_t bh) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  const int64_t Dp = d.Dp, Lkp = d.Lkp;
  const int64_t b = bh / d.N, h = bh % d.N;
  thread_local std::vector<float> buf;
  float* kt = scratch(buf, Dp * Lkp * 3 + BQ * Dp * 2 + BQ * Lkp + Lkp);
  float* vp = kt + Dp * Lkp;
  float* qb = vp + Lkp * Dp;
  float* ob = qb + BQ * Dp;
  float* s = ob + BQ * Dp;
  float* kp = s + BQ * Lkp;
  float* mrow = kp + Lkp * Dp;  // the dropout's factors for one query's keys
  const float* bias_b = bias_ + b * d.Lk;
  const Dims e = keys_in_use(d, bias_b);  // (buffers are laid out for d's keys, the most)
  gather(K, e, d.Lk, b, h, 0, e.Lk, 1.f, kp);
  transpose_rows(kp, e, kt);
  gather(V, e, d.Lk, b, h, 0, e.Lk, 1.f, vp);
  for (int64_t i0 = 0; i0 < d.Lq; i0 += BQ) {
    const int R = static_cast<int>(std::min<int64_t>(BQ, d.Lq - i0));
    float inv[BQ];  // 1 / sum(e) per query: the softmax's normalisation, applied after e @ v
    gather(Q, d, d.Lq, b, h, i0, R, scale, qb);  // q / sqrt(D)
    mat_abt(qb, R, kt, e.Dp, e.Lkp, s);
    for (int r = 0; r < R; ++r) {
      float* sr = s + (int64_t)r * e.Lkp;
      int64_t j = 0;
      vf m = splat(kLowest);
      for (; j + W <= e.Lk; j += W) {
        vf x = ld(sr + j) + ld(bias_b + j);
        st(sr + j, x);
        m = x > m ? x : m;
      }
      float mx = hmax(m);
      for (; j < e.Lk; ++j) { sr[j] += bias_b[j]; mx = std::max(mx, sr[j]); }
      vf acc = {};
      for (j = 0; j + W <= e.Lk; j += W) {
        vf ex = vexp(ld(sr + j) - mx);
        st(sr + j, ex);
        acc += ex;
      }
      float l = hsum(acc);
      for (; j < e.Lk; ++j) { sr[j] = std::exp(sr[j] - mx); l += sr[j]; }
      inv[r] = 1.0f / l;
      if (dr.on) {  // after the sum: the softmax normalises over every key, dropped or not
        dropout_row(dr, row_key(dr, bh, d.Lq, i0 + r), e.Lk, mrow);
        for (j = 0; j + W <= e.Lk; j += W) st(sr + j, ld(sr + j) * ld(mrow + j));
        for (; j < e.Lk; ++j) sr[j] *= mrow[j];
      }
      MAX[bh * d.Lq + i0 + r] = mx;
      INV[bh * d.Lq + i0 + r] = inv[r];
    }
    mat_pv(s, R, vp, static_cast<int>(e.Lk), e.Lkp, e.Dp, ob);  // unnormalised: e @ v
    for (int r = 0; r < R; ++r) scatter(ob + r * Dp, d, d.Lq, b, h, i0 + r, 1, inv[r], O);
  }
}

ffi::Error Forward(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                   ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> bias,
                   ffi::Buffer<ffi::U32> seed, ffi::ResultBuffer<ffi::F32> out,
                   ffi::ResultBuffer<ffi::F32> row_max, ffi::ResultBuffer<ffi::F32> inv_sum,
                   float dropout_rate) {
  const Dims d = dims_of(q, k);
  const Dropout dr = dropout_of(seed.typed_data(), dropout_rate);
  parallel_for(pool, d.B * d.N, [&](int64_t bh) {
    forward_head(d, q.typed_data(), k.typed_data(), v.typed_data(), bias.typed_data(), dr,
                 out->typed_data(), row_max->typed_data(), inv_sum->typed_data(), bh);
  });
  return ffi::Error::Success();
}

// ---- Backward ---------------------------------------------------------------------------------

// The backward of one (batch, head) pair `bh`: its rows of DQ, DK and DV.
void backward_head(const Dims& d, const float* Q, const float* K, const float* V,
                   const float* bias_, const Dropout& dr, const float* O, const float* MAX,
                   const float* INV, const float* DO, float* DQ, float* DK, float* DV,
                   int64_t bh) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  const int64_t Dp = d.Dp, Lkp = d.Lkp;
  const int64_t b = bh / d.N, h = bh % d.N;
  thread_local std::vector<float> buf;
  float* kt = scratch(buf, Dp * Lkp * 5 + BQ * Dp * 4 + BQ * Lkp * 2 + Lkp);
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
  const float* bias_b = bias_ + b * d.Lk;
  const Dims e = keys_in_use(d, bias_b);  // (buffers are laid out for d's keys, the most)
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
      int64_t j = 0;
      if (!dr.on) {
        for (; j + W <= e.Lk; j += W) {
          vf pj = vexp(ld(pr + j) + ld(bias_b + j) - mx) * inv;
          st(pr + j, pj);
          st(dsr + j, pj * (ld(dsr + j) - row));
        }
        for (; j < e.Lk; ++j) {
          pr[j] = std::exp(pr[j] + bias_b[j] - mx) * inv[0];
          dsr[j] = pr[j] * (dsr[j] - row);
        }
        continue;
      }
      // With dropout: dP = M * (dO v^T), dS = P * (dP - row), and dv takes P * M.
      dropout_row(dr, row_key(dr, bh, d.Lq, i0 + r), e.Lk, mrow);
      for (; j + W <= e.Lk; j += W) {
        vf pj = vexp(ld(pr + j) + ld(bias_b + j) - mx) * inv;
        vf mj = ld(mrow + j);
        st(pr + j, pj * mj);
        st(dsr + j, pj * (ld(dsr + j) * mj - row));
      }
      for (; j < e.Lk; ++j) {
        float pj = std::exp(pr[j] + bias_b[j] - mx) * inv[0];
        pr[j] = pj * mrow[j];
        dsr[j] = pj * (dsr[j] * mrow[j] - row);
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

ffi::Error Backward(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                    ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> bias,
                    ffi::Buffer<ffi::U32> seed, ffi::Buffer<ffi::F32> out,
                    ffi::Buffer<ffi::F32> row_max, ffi::Buffer<ffi::F32> inv_sum,
                    ffi::Buffer<ffi::F32> d_out, ffi::ResultBuffer<ffi::F32> dq,
                    ffi::ResultBuffer<ffi::F32> dk, ffi::ResultBuffer<ffi::F32> dv,
                    float dropout_rate) {
  const Dims d = dims_of(q, k);
  const Dropout dr = dropout_of(seed.typed_data(), dropout_rate);
  parallel_for(pool, d.B * d.N, [&](int64_t bh) {
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
);
