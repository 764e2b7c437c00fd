;; The 2-bit pack and unpack kernels in WebAssembly SIMD (128-bit), for lib/pack/layout.ts, which owns the
;; convention and calls these on whole 64-code blocks (the scalar word kernels there do any tail):
;;
;;     code c = t + 1 in {0, 1, 2};  byte = c0 | c1 << 2 | c2 << 4 | c3 << 6  (code 3 is invalid)
;;
;; Compiled by scripts/gen-wasm.ts into kernels.wasm.ts (do not edit that file). The memory is the caller's:
;; layout.ts instantiates the module on a memory that holds a block of input and the whole output, so a
;; result is returned in place (copies out of a WebAssembly memory are slow in V8; copies in are not).
(module
  (import "pack" "memory" (memory 1))

  ;; pack(src, dst, n): n int8 values at src (n a multiple of 64) -> n / 4 bytes at dst.
  ;; Returns 1 when some value was outside {-1, 0, 1} (dst is then unspecified), else 0.
  ;; Per 16 values: y = t + 1 per byte (a valid code is 0..2, anything else is > 2 unsigned); on each
  ;; 32-bit lane of four codes, z = y | y >> 6 puts c1 beside c0 and c3 beside c2, z | z >> 12 brings c2 c3
  ;; down to bits 4-7; the low byte of each lane is the packed byte. Two saturating narrows (exact here:
  ;; every lane is <= 255) gather the 16 low bytes of four vectors in order.
  (func (export "pack") (param $src i32) (param $dst i32) (param $n i32) (result i32)
    (local $end i32) (local $bad v128)
    (local $a v128) (local $b v128) (local $c v128) (local $d v128)
    (local.set $end (i32.add (local.get $src) (local.get $n)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $src) (local.get $end)))
        (local.set $a (i8x16.add (v128.load offset=0 (local.get $src)) (v128.const i8x16 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1)))
        (local.set $b (i8x16.add (v128.load offset=16 (local.get $src)) (v128.const i8x16 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1)))
        (local.set $c (i8x16.add (v128.load offset=32 (local.get $src)) (v128.const i8x16 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1)))
        (local.set $d (i8x16.add (v128.load offset=48 (local.get $src)) (v128.const i8x16 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1)))
        (local.set $bad
          (v128.or (local.get $bad)
            (v128.or
              (v128.or (i8x16.gt_u (local.get $a) (v128.const i8x16 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2))
                       (i8x16.gt_u (local.get $b) (v128.const i8x16 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2)))
              (v128.or (i8x16.gt_u (local.get $c) (v128.const i8x16 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2))
                       (i8x16.gt_u (local.get $d) (v128.const i8x16 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2))))))
        (local.set $a (v128.or (local.get $a) (i32x4.shr_u (local.get $a) (i32.const 6))))
        (local.set $b (v128.or (local.get $b) (i32x4.shr_u (local.get $b) (i32.const 6))))
        (local.set $c (v128.or (local.get $c) (i32x4.shr_u (local.get $c) (i32.const 6))))
        (local.set $d (v128.or (local.get $d) (i32x4.shr_u (local.get $d) (i32.const 6))))
        (local.set $a (v128.and (v128.or (local.get $a) (i32x4.shr_u (local.get $a) (i32.const 12))) (v128.const i32x4 255 255 255 255)))
        (local.set $b (v128.and (v128.or (local.get $b) (i32x4.shr_u (local.get $b) (i32.const 12))) (v128.const i32x4 255 255 255 255)))
        (local.set $c (v128.and (v128.or (local.get $c) (i32x4.shr_u (local.get $c) (i32.const 12))) (v128.const i32x4 255 255 255 255)))
        (local.set $d (v128.and (v128.or (local.get $d) (i32x4.shr_u (local.get $d) (i32.const 12))) (v128.const i32x4 255 255 255 255)))
        (v128.store (local.get $dst)
          (i8x16.narrow_i16x8_u
            (i16x8.narrow_i32x4_u (local.get $a) (local.get $b))
            (i16x8.narrow_i32x4_u (local.get $c) (local.get $d))))
        (local.set $src (i32.add (local.get $src) (i32.const 64)))
        (local.set $dst (i32.add (local.get $dst) (i32.const 16)))
        (br $next)))
    (v128.any_true (local.get $bad)))

  ;; unpack(src, dst, n): n packed bytes at src (n a multiple of 16) -> 4 n int8 values at dst.
  ;; Returns 1 when some byte holds the code 3 (dst is then unspecified), else 0.
  ;; Per 16 bytes: the four fields f_k = (b >> 2k) & 3 as four vectors (16-bit shifts: a bit crossing into
  ;; the next byte lands above the mask), interleaved byte-wise (f0 f1, f2 f3) and then pair-wise, so that
  ;; out[4 i + k] = f_k[i], minus 1. A byte b holds a 3 exactly when b & (b >> 1) & 0x55 is non-zero.
  (func (export "unpack") (param $src i32) (param $dst i32) (param $n i32) (result i32)
    (local $end i32) (local $bad v128) (local $v v128)
    (local $f0 v128) (local $f1 v128) (local $f2 v128) (local $f3 v128)
    (local $lo01 v128) (local $hi01 v128) (local $lo23 v128) (local $hi23 v128)
    (local.set $end (i32.add (local.get $src) (local.get $n)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $src) (local.get $end)))
        (local.set $v (v128.load (local.get $src)))
        (local.set $bad (v128.or (local.get $bad) (v128.and (local.get $v) (i16x8.shr_u (local.get $v) (i32.const 1)))))
        (local.set $f0 (v128.and (local.get $v) (v128.const i8x16 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3)))
        (local.set $f1 (v128.and (i16x8.shr_u (local.get $v) (i32.const 2)) (v128.const i8x16 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3)))
        (local.set $f2 (v128.and (i16x8.shr_u (local.get $v) (i32.const 4)) (v128.const i8x16 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3)))
        (local.set $f3 (v128.and (i16x8.shr_u (local.get $v) (i32.const 6)) (v128.const i8x16 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3)))
        (local.set $lo01 (i8x16.shuffle 0 16 1 17 2 18 3 19 4 20 5 21 6 22 7 23 (local.get $f0) (local.get $f1)))
        (local.set $hi01 (i8x16.shuffle 8 24 9 25 10 26 11 27 12 28 13 29 14 30 15 31 (local.get $f0) (local.get $f1)))
        (local.set $lo23 (i8x16.shuffle 0 16 1 17 2 18 3 19 4 20 5 21 6 22 7 23 (local.get $f2) (local.get $f3)))
        (local.set $hi23 (i8x16.shuffle 8 24 9 25 10 26 11 27 12 28 13 29 14 30 15 31 (local.get $f2) (local.get $f3)))
        (v128.store offset=0 (local.get $dst)
          (i8x16.sub (i8x16.shuffle 0 1 16 17 2 3 18 19 4 5 20 21 6 7 22 23 (local.get $lo01) (local.get $lo23))
                     (v128.const i8x16 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1)))
        (v128.store offset=16 (local.get $dst)
          (i8x16.sub (i8x16.shuffle 8 9 24 25 10 11 26 27 12 13 28 29 14 15 30 31 (local.get $lo01) (local.get $lo23))
                     (v128.const i8x16 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1)))
        (v128.store offset=32 (local.get $dst)
          (i8x16.sub (i8x16.shuffle 0 1 16 17 2 3 18 19 4 5 20 21 6 7 22 23 (local.get $hi01) (local.get $hi23))
                     (v128.const i8x16 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1)))
        (v128.store offset=48 (local.get $dst)
          (i8x16.sub (i8x16.shuffle 8 9 24 25 10 11 26 27 12 13 28 29 14 15 30 31 (local.get $hi01) (local.get $hi23))
                     (v128.const i8x16 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1)))
        (local.set $src (i32.add (local.get $src) (i32.const 16)))
        (local.set $dst (i32.add (local.get $dst) (i32.const 64)))
        (br $next)))
    (v128.any_true (v128.and (local.get $bad) (v128.const i8x16 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55))))
)
