// bfloat16 matmuls on AMX tiles (Intel Xeon from Sapphire Rapids on), as an XLA FFI call.
//
// C (M x N, float32) = op(A) @ op(B), A and B bfloat16, op() an optional transpose, sums in
// float32 (TDPBF16PS: each product of two bfloat16 numbers is exact in float32). XLA's CPU
// backend runs a bfloat16 dot as a float32 one between conversions (jaxlib 0.10), at 1/5 to 1/8
// of what these tiles give (docs/cpu_profile.md, sixth pass); this kernel is what
// `poi_jax/layers/matmul.py` calls for the dense layers under `jax_default_matmul_precision=
// bfloat16` on such a CPU.
//
// Layout. A tile holds 16 rows of 64 bytes. The product takes A as 16 rows x 32 bfloat16 and B
// as 16 rows x 32 bfloat16 where a B row interleaves two consecutive k of 16 columns ("VNNI":
// B[k][n], B[k+1][n] side by side). So B is always packed, per block of 16 columns, into K/2
// rows of 32 (zero-padded to K a multiple of 32 and N a multiple of 32); A is read in place when
// it is row-major with K a multiple of 32, else packed (transposed if asked, zero-padded). A
// micro-step multiplies a 32 x 32 block of C (four accumulator tiles) by a 32-wide slice of K:
// two A tiles and two B tiles, four TDPBF16PS. Rows of C in blocks of 32 go to XLA's thread pool.
// Built on first use by poi_jax/layers/cpu_matmul_amx.py with -mamx-tile -mamx-bf16.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "amx_tiles.h"
#include "native_parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using poi_jax_native::amx_configure_tiles;
using poi_jax_native::amx_multiply_block;
using poi_jax_native::amx_store_block;
using poi_jax_native::amx_tiles_granted;
using poi_jax_native::amx_zero_block;
using poi_jax_native::parallel_for;

namespace {

constexpr int64_t kBlock = 32;  // rows and columns of C a micro-step computes; K's step too
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// op(B) (K x N) -> for each block of 16 columns, Kp / 2 rows of 16 (k, k + 1) pairs, zeros
// beyond K and N. b is (K x N) row-major, or (N x K) with trans_b. One call packs the two
// blocks of columns [32 p, 32 p + 32): a whole cache line of each row of b.
void pack_b(const uint16_t* b, bool trans_b, int64_t K, int64_t N, int64_t Kp,
            uint16_t* packed, int64_t pair) {
  for (int64_t half = 0; half < 2; ++half) {
    const int64_t n_block = 2 * pair + half, n0 = n_block * 16;
    uint16_t* out = packed + n_block * (Kp / 2) * 32;
    const int64_t cols = std::max<int64_t>(0, std::min<int64_t>(16, N - n0));
    for (int64_t kp = 0; kp < Kp / 2; ++kp) {
      uint16_t* row = out + kp * 32;
      const int64_t k0 = 2 * kp, k1 = 2 * kp + 1;
      if (cols == 16 && k1 < K && !trans_b) {  // the interior: interleave two rows of b
        const uint16_t* r0 = b + k0 * N + n0;
        const uint16_t* r1 = b + k1 * N + n0;
        for (int64_t j = 0; j < 16; ++j) {
          row[2 * j] = r0[j];
          row[2 * j + 1] = r1[j];
        }
        continue;
      }
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t n = n0 + j;
        const bool in_n = j < cols;
        row[2 * j] = in_n && k0 < K ? (trans_b ? b[n * K + k0] : b[k0 * N + n]) : 0;
        row[2 * j + 1] = in_n && k1 < K ? (trans_b ? b[n * K + k1] : b[k1 * N + n]) : 0;
      }
    }
  }
}

// out[i * out_ld + j] = in[j * in_ld + i] for an 8 x 8 block of 16-bit values: three rounds of
// unpacks (16-, 32-, 64-bit), the standard SSE2 transpose.
inline void transpose8x8(const uint16_t* in, int64_t in_ld, uint16_t* out, int64_t out_ld) {
  __m128i r[8], t[8];
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j * in_ld));
  }
  const __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
  const __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
  const __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
  const __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
  const __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
  const __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
  const __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
  const __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
  t[0] = _mm_unpacklo_epi64(b0, b4);
  t[1] = _mm_unpackhi_epi64(b0, b4);
  t[2] = _mm_unpacklo_epi64(b1, b5);
  t[3] = _mm_unpackhi_epi64(b1, b5);
  t[4] = _mm_unpacklo_epi64(b2, b6);
  t[5] = _mm_unpackhi_epi64(b2, b6);
  t[6] = _mm_unpacklo_epi64(b3, b7);
  t[7] = _mm_unpackhi_epi64(b3, b7);
  for (int i = 0; i < 8; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i * out_ld), t[i]);
  }
}

// Rows [m0, m0 + 32) of op(A) into 32 rows of Kp, ld apart (zeros beyond M and K). a is
// (M x K) row-major, or (K x M) with trans_a.
void pack_a(const uint16_t* a, bool trans_a, int64_t M, int64_t K, int64_t Kp, int64_t ld,
            int64_t m0, uint16_t* out) {
  if (trans_a) {
    const int64_t rows = std::min(kBlock, M - m0);
    std::fill(out, out + kBlock * ld, uint16_t{0});
    int64_t k = 0;
    if (rows == kBlock) {  // whole 8 x 8 blocks of (k, m); a 32-bit scatter per element was
      for (; k + 8 <= K; k += 8) {  // as slow as the product for a weight gradient
        for (int64_t i = 0; i < kBlock; i += 8) {
          transpose8x8(a + k * M + m0 + i, M, out + i * ld + k, ld);
        }
      }
    }
    for (; k < K; ++k) {  // the rest: each k reads the block's consecutive m of one row of a
      const uint16_t* in = a + k * M + m0;
      for (int64_t i = 0; i < rows; ++i) out[i * ld + k] = in[i];
    }
    return;
  }
  for (int64_t i = 0; i < kBlock; ++i) {
    const int64_t m = m0 + i;
    uint16_t* row = out + i * ld;
    if (m >= M) {
      std::fill(row, row + Kp, uint16_t{0});
      continue;
    }
    std::memcpy(row, a + m * K, K * sizeof(uint16_t));
    std::fill(row + K, row + Kp, uint16_t{0});
  }
}

// The distance between packed rows of A: Kp, plus a cache line when Kp rows would be a
// multiple of 4 KB apart (a tile's 16 rows in one L1 set, evicting one another).
int64_t packed_lda(int64_t Kp) { return (Kp * 2) % 4096 == 0 ? Kp + 32 : Kp; }

// C[m0 : m0 + 32, n_begin : n_end) = A rows (32 x Kp, leading dimension lda) @ packed B.
void block_row(const uint16_t* a, int64_t lda, const uint16_t* packed, int64_t Kp, int64_t M,
               int64_t N, int64_t m0, int64_t n_begin, int64_t n_end, float* c, float* edge) {
  for (int64_t n = n_begin; n < n_end; n += kBlock) {
    amx_zero_block();
    const uint16_t* b0 = packed + (n / 16) * (Kp / 2) * 32;
    amx_multiply_block(a, lda, b0, b0 + (Kp / 2) * 32, Kp);
    if (m0 + kBlock <= M && n + kBlock <= N) {  // a whole block: straight into C
      amx_store_block(c + m0 * N + n, N);
    } else {  // the edge: through a 32 x 32 scratch, then the rows and columns that exist
      amx_store_block(edge, kBlock);
      const int64_t rows = std::min(kBlock, M - m0), cols = std::min(kBlock, N - n);
      for (int64_t i = 0; i < rows; ++i) {
        std::memcpy(c + (m0 + i) * N + n, edge + i * kBlock, cols * sizeof(float));
      }
    }
  }
}

ffi::Error Matmul(ffi::ThreadPool pool, ffi::Buffer<ffi::BF16> a, ffi::Buffer<ffi::BF16> b,
                  ffi::ResultBuffer<ffi::F32> c, bool trans_a, bool trans_b) {
  if (!amx_tiles_granted()) {
    return ffi::Error(ffi::ErrorCode::kUnavailable,
                      "Linux did not grant this process the AMX tiles (arch_prctl "
                      "ARCH_REQ_XCOMP_PERM); a kernel before 5.16 or a CPU without AMX");
  }
  auto da = a.dimensions(), db = b.dimensions(), dc = c->dimensions();
  if (da.size() != 2 || db.size() != 2 || dc.size() != 2) {
    return ffi::Error::InvalidArgument("poi_jax_cpu_matmul_amx takes 2-D operands");
  }
  const int64_t M = trans_a ? da[1] : da[0], K = trans_a ? da[0] : da[1];
  const int64_t Kb = trans_b ? db[1] : db[0], N = trans_b ? db[0] : db[1];
  if (K != Kb || dc[0] != M || dc[1] != N) {
    return ffi::Error::InvalidArgument("poi_jax_cpu_matmul_amx: shapes do not agree");
  }
  if (M == 0 || N == 0) return ffi::Error::Success();
  const auto* pa = reinterpret_cast<const uint16_t*>(a.typed_data());
  const auto* pb = reinterpret_cast<const uint16_t*>(b.typed_data());
  float* pc = c->typed_data();
  const int64_t Kp = std::max<int64_t>(round_up(K, kBlock), kBlock);
  const int64_t Np = round_up(N, kBlock), Mp = round_up(M, kBlock);

  // The packed operands live in the calling thread's buffers, kept across calls: a fresh
  // vector of megabytes is zeroed and page-faulted in on every call (packing writes every
  // element, padding included). The lambdas below use pointers to them: a thread_local named
  // inside a lambda would be the pool thread's own.
  thread_local std::vector<uint16_t> packed_b, packed_a;
  if (packed_b.size() < static_cast<size_t>(Np * Kp)) packed_b.resize(Np * Kp);
  uint16_t* const b_buf = packed_b.data();
  parallel_for(pool, Np / kBlock,
               [&](int64_t pair) { pack_b(pb, trans_b, K, N, Kp, b_buf, pair); });

  // A in place when its rows are C's, hold a whole number of K steps and are not a multiple of
  // 4 KB apart (`packed_lda`); else packed once.
  const bool in_place = !trans_a && K == Kp && packed_lda(Kp) == Kp;
  const int64_t lda = packed_lda(Kp);
  if (!in_place && packed_a.size() < static_cast<size_t>(Mp * lda)) packed_a.resize(Mp * lda);
  uint16_t* const a_buf = packed_a.data();
  if (!in_place) {
    parallel_for(pool, Mp / kBlock, [&](int64_t mb) {
      pack_a(pa, trans_a, M, K, Kp, lda, mb * kBlock, a_buf + mb * kBlock * lda);
    });
  }
  // B in panels of columns that stay in a core's L2 (~1 MB of packed B) while every block of
  // rows passes over them: a weight gradient's B (tokens x features, e.g. 2,048 x 1,536: 6 MB)
  // would otherwise come from memory once per block of rows.
  const int64_t panel = std::max<int64_t>(kBlock, (1 << 20) / (Kp * 2) / kBlock * kBlock);
  const int64_t panels = (Np + panel - 1) / panel, row_blocks = Mp / kBlock;
  parallel_for(pool, panels * row_blocks, [&](int64_t task) {
    const int64_t n_begin = task / row_blocks * panel, m0 = task % row_blocks * kBlock;
    const int64_t n_end = std::min(Np, n_begin + panel);
    alignas(64) float edge[kBlock * kBlock];
    amx_configure_tiles();
    if (in_place && m0 + kBlock <= M) {
      block_row(pa + m0 * K, K, b_buf, Kp, M, N, m0, n_begin, n_end, pc, edge);
    } else if (in_place) {  // the last rows of an in-place A: padded to a whole block
      thread_local std::vector<uint16_t> rows;
      rows.resize(kBlock * lda);
      pack_a(pa, false, M, K, Kp, lda, m0, rows.data());
      block_row(rows.data(), lda, b_buf, Kp, M, N, m0, n_begin, n_end, pc, edge);
    } else {
      block_row(a_buf + m0 * lda, lda, b_buf, Kp, M, N, m0, n_begin, n_end, pc, edge);
    }
    _tile_release();
  });
  return ffi::Error::Success();
}

}  // namespace

// Whether Linux granted this process the tiles (1) or not (0): asked once when the library is
// loaded (poi_jax/layers/cpu_matmul_amx.py), so that a refusal keeps XLA's matmuls at trace time
// instead of failing the first call of a compiled step.
extern "C" int PoiCpuMatmulAmxTilesGranted() { return amx_tiles_granted() ? 1 : 0; }

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    PoiCpuMatmulAmx, Matmul,
    ffi::Ffi::Bind()
        .Ctx<ffi::ThreadPool>()
        .Arg<ffi::Buffer<ffi::BF16>>()  // a (M, K), or (K, M) with trans_a
        .Arg<ffi::Buffer<ffi::BF16>>()  // b (K, N), or (N, K) with trans_b
        .Ret<ffi::Buffer<ffi::F32>>()   // c (M, N)
        .Attr<bool>("trans_a")
        .Attr<bool>("trans_b")
);
