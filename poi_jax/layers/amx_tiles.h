// AMX tiles for the native kernels that multiply on them (cpu_matmul_amx.cc, and cpu_attention.cc's
// bfloat16 variant): Linux's permission, the one tile configuration both use, and the micro-step
// on a 32 x 32 block of C. Include only where the compiler targets AMX-BF16 (-mamx-tile
// -mamx-bf16, or -march=native on such a CPU).
#ifndef POI_JAX_AMX_TILES_H_
#define POI_JAX_AMX_TILES_H_

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>

namespace poi_jax_native {

// Linux hands the tiles' state to a process only when it asks (once per process; a kernel
// before 5.16 refuses).
inline bool amx_tiles_granted() {
  static std::once_flag once;
  static bool granted = false;
  std::call_once(once, [] {
    constexpr int kArchReqXcompPerm = 0x1023;  // arch_prctl: ask for an extended state component
    constexpr int kXfeatureXtiledata = 18;     // the AMX tile data
    granted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  });
  return granted;
}

// Tiles 0-3: a 32 x 32 block of C as 2 x 2 float32 accumulators of 16 x 16; 4, 5: the two
// 16-row halves of A's 32 rows (16 x 32 bfloat16 each); 6, 7: the two 16-column halves of B,
// packed ("VNNI": 16 rows of 16 (k, k + 1) pairs). The configuration is per thread: load it
// before a thread's tile operations, `_tile_release()` after.
inline void amx_configure_tiles() {
  struct {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 16;
    config.colsb[t] = 64;
  }
  _tile_loadconfig(&config);
}

// C's block in tiles 0-3 from memory (c, row stride ldc floats), or zeros.
inline void amx_load_block(const float* c, int64_t ldc) {
  _tile_loadd(0, c, ldc * 4);
  _tile_loadd(1, c + 16, ldc * 4);
  _tile_loadd(2, c + 16 * ldc, ldc * 4);
  _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
}
inline void amx_zero_block() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// C's block (tiles 0-3) += A (32 rows of bfloat16, row stride lda) @ B over K (a multiple of
// 32); b0, b1: B's two packed 16-column halves, K / 2 rows of 32 bfloat16s each.
inline void amx_multiply_block(const uint16_t* a, int64_t lda, const uint16_t* b0,
                               const uint16_t* b1, int64_t K) {
  for (int64_t k = 0; k < K; k += 32) {
    _tile_loadd(4, a + k, lda * 2);
    _tile_loadd(5, a + 16 * lda + k, lda * 2);
    _tile_loadd(6, b0 + (k / 2) * 32, 64);
    _tile_loadd(7, b1 + (k / 2) * 32, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}

// C's block (tiles 0-3) to memory (c, row stride ldc floats).
inline void amx_store_block(float* c, int64_t ldc) {
  _tile_stored(0, c, ldc * 4);
  _tile_stored(1, c + 16, ldc * 4);
  _tile_stored(2, c + 16 * ldc, ldc * 4);
  _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
}

}  // namespace poi_jax_native

#endif  // POI_JAX_AMX_TILES_H_
