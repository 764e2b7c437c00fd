;; The audit's code test in WebAssembly SIMD, written apart from lib/pack's kernels: does any byte of a run
;; hold the invalid code 0b11 in one of its four 2-bit fields? A byte b does exactly when
;; b & (b >> 1) & 0x55 is non-zero (a 16-bit shift is fine: a bit crossing into the next byte lands on bit
;; 7, outside the mask). The memory is the scanner thread's (scan-worker.mjs), which reads file chunks
;; straight into it.
;; Compiled by scripts/gen-wasm.ts into scan.wasm.ts (do not edit that file).
(module
  (import "audit" "memory" (memory 1))

  ;; anyInvalid(p, n): 1 when some byte of [p, p + n) holds a 3, else 0; n a multiple of 64.
  (func (export "anyInvalid") (param $p i32) (param $n i32) (result i32)
    (local $end i32) (local $acc v128) (local $v v128) (local $w v128) (local $x v128) (local $y v128)
    (local.set $end (i32.add (local.get $p) (local.get $n)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $p) (local.get $end)))
        (local.set $v (v128.load offset=0 (local.get $p)))
        (local.set $w (v128.load offset=16 (local.get $p)))
        (local.set $x (v128.load offset=32 (local.get $p)))
        (local.set $y (v128.load offset=48 (local.get $p)))
        (local.set $acc
          (v128.or (local.get $acc)
            (v128.or
              (v128.or (v128.and (local.get $v) (i16x8.shr_u (local.get $v) (i32.const 1)))
                       (v128.and (local.get $w) (i16x8.shr_u (local.get $w) (i32.const 1))))
              (v128.or (v128.and (local.get $x) (i16x8.shr_u (local.get $x) (i32.const 1)))
                       (v128.and (local.get $y) (i16x8.shr_u (local.get $y) (i32.const 1)))))))
        (local.set $p (i32.add (local.get $p) (i32.const 64)))
        (br $next)))
    (v128.any_true (v128.and (local.get $acc) (v128.const i8x16 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55 0x55))))
)
