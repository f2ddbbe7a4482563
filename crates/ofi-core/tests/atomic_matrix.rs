//! The atomic engine against independent models: every valid (kind, op,
//! datatype) under random inputs, every invalid combination and buffer shape
//! refused without side effects, and the software long double checked bit
//! for bit against the C compiler's x87 `long double`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};

use ofi_core::consts::atomic_op::*;
use ofi_core::consts::datatype::*;
use ofi_core::error::errno;
use ofi_core::util::atomic::{
    apply, datatype_size, is_supported_datatype, query, valid, AtomicKind,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const KINDS: [AtomicKind; 3] = [AtomicKind::Basic, AtomicKind::Fetch, AtomicKind::Compare];
const INTS: [u32; 10] = [
    FI_INT8, FI_UINT8, FI_INT16, FI_UINT16, FI_INT32, FI_UINT32, FI_INT64, FI_UINT64, FI_INT128,
    FI_UINT128,
];
const REALS: [u32; 3] = [FI_FLOAT, FI_DOUBLE, FI_LONG_DOUBLE];
const COMPLEXES: [u32; 3] = [FI_FLOAT_COMPLEX, FI_DOUBLE_COMPLEX, FI_LONG_DOUBLE_COMPLEX];

/// The datatypes libfabric defines `op` for in a call family (the man page
/// and libfabric's handler tables, written out independently of the engine).
fn expected_datatypes(kind: AtomicKind, op: u32) -> Vec<u32> {
    let ints = INTS.to_vec();
    let reals: Vec<u32> = INTS.iter().chain(REALS.iter()).copied().collect();
    let all: Vec<u32> = reals.iter().chain(COMPLEXES.iter()).copied().collect();
    match (kind, op) {
        (AtomicKind::Basic | AtomicKind::Fetch, FI_MIN | FI_MAX) => reals,
        (
            AtomicKind::Basic | AtomicKind::Fetch,
            FI_SUM | FI_PROD | FI_LOR | FI_LAND | FI_LXOR | FI_ATOMIC_WRITE,
        ) => all,
        (AtomicKind::Basic | AtomicKind::Fetch, FI_BOR | FI_BAND | FI_BXOR) => ints,
        (AtomicKind::Fetch, FI_ATOMIC_READ) => all,
        (AtomicKind::Compare, FI_CSWAP | FI_CSWAP_NE) => all,
        (AtomicKind::Compare, FI_CSWAP_LE | FI_CSWAP_LT | FI_CSWAP_GE | FI_CSWAP_GT) => reals,
        (AtomicKind::Compare, FI_MSWAP) => ints,
        _ => Vec::new(),
    }
}

fn valid_triples() -> Vec<(AtomicKind, u32, u32)> {
    let mut v = Vec::new();
    for kind in KINDS {
        for op in 0..FI_ATOMIC_OP_LAST {
            for dt in expected_datatypes(kind, op) {
                v.push((kind, op, dt));
            }
        }
    }
    v
}

fn size_of(dt: u32) -> usize {
    match dt {
        FI_INT8 | FI_UINT8 => 1,
        FI_INT16 | FI_UINT16 => 2,
        FI_INT32 | FI_UINT32 | FI_FLOAT => 4,
        FI_INT64 | FI_UINT64 | FI_DOUBLE | FI_FLOAT_COMPLEX => 8,
        FI_LONG_DOUBLE_COMPLEX => 32,
        _ => 16,
    }
}

// ---------------------------------------------------------------------------
// The C oracle for long double.

const ORACLE_C: &str = r#"
#include <stdio.h>
#include <string.h>

static int get(long double *x)
{
    char h[64];
    unsigned char b[sizeof(long double)];
    memset(b, 0, sizeof b);
    if (scanf("%63s", h) != 1 || strlen(h) != 20)
        return 0;
    for (int i = 0; i < 10; i++) {
        unsigned v;
        if (sscanf(h + 2 * i, "%2x", &v) != 1)
            return 0;
        b[i] = (unsigned char)v;
    }
    memcpy(x, b, sizeof *x);
    return 1;
}

static void put(long double x)
{
    unsigned char b[sizeof(long double)];
    memcpy(b, &x, sizeof x);
    for (int i = 0; i < 10; i++)
        printf("%02x", b[i]);
}

int main(void)
{
    char op[16];
    long double a, b, c, d;
    while (scanf("%15s", op) == 1) {
        if (!strcmp(op, "add") && get(&a) && get(&b)) {
            put(a + b);
        } else if (!strcmp(op, "sub") && get(&a) && get(&b)) {
            put(a - b);
        } else if (!strcmp(op, "mul") && get(&a) && get(&b)) {
            put(a * b);
        } else if (!strcmp(op, "cmp") && get(&a) && get(&b)) {
            printf("%d%d%d%d%d%d", a < b, a <= b, a == b, a != b, a >= b, a > b);
        } else if (!strcmp(op, "cmul") && get(&a) && get(&b) && get(&c) && get(&d)) {
            put(a * c - b * d);
            putchar(' ');
            put(a * d + b * c);
        } else {
            printf("error");
        }
        putchar('\n');
        fflush(stdout);
    }
    return 0;
}
"#;

/// A running oracle process: one request line in, one answer line out.
struct Oracle {
    _child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Oracle {
    fn start() -> Oracle {
        if let Err(e) = Command::new("cc").arg("--version").output() {
            panic!(
                "the long double tests need a C compiler: running `cc` failed ({e}); \
                 install gcc (or another cc with x87 long double)"
            );
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("ofi-atomic-f80-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the oracle's temp dir");
        let src = dir.join("oracle.c");
        let bin = dir.join("oracle");
        std::fs::write(&src, ORACLE_C).expect("write oracle.c");
        let out = Command::new("cc")
            .arg("-O1")
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .output()
            .expect("run cc");
        assert!(
            out.status.success(),
            "cc failed to build the long double oracle:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut child = Command::new(&bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the long double oracle");
        // The running process keeps its executable; the files can go.
        let _ = std::fs::remove_dir_all(&dir);
        let input = child.stdin.take().expect("oracle stdin");
        let output = BufReader::new(child.stdout.take().expect("oracle stdout"));
        Oracle {
            _child: child,
            input,
            output,
        }
    }

    /// Answers requests in order (in chunks, so neither pipe fills up).
    fn ask(&mut self, requests: &[String]) -> Vec<String> {
        let mut answers = Vec::with_capacity(requests.len());
        for chunk in requests.chunks(256) {
            let mut text = String::new();
            for r in chunk {
                text.push_str(r);
                text.push('\n');
            }
            self.input
                .write_all(text.as_bytes())
                .expect("write to oracle");
            self.input.flush().expect("flush oracle input");
            for _ in chunk {
                let mut line = String::new();
                self.output.read_line(&mut line).expect("read from oracle");
                let line = line.trim_end().to_owned();
                assert!(
                    line != "error" && !line.is_empty(),
                    "oracle rejected a request"
                );
                answers.push(line);
            }
        }
        answers
    }

    fn one(&mut self, request: String) -> String {
        self.ask(&[request]).remove(0)
    }
}

fn oracle() -> MutexGuard<'static, Oracle> {
    static ORACLE: OnceLock<Mutex<Oracle>> = OnceLock::new();
    ORACLE
        .get_or_init(|| Mutex::new(Oracle::start()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn hex10(b: &[u8]) -> String {
    b[..10].iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex10(s: &str) -> [u8; 10] {
    let mut out = [0u8; 10];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("oracle hex");
    }
    out
}

/// The six C comparisons `a < b, a <= b, a == b, a != b, a >= b, a > b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cmp([bool; 6]);

impl Cmp {
    fn parse(s: &str) -> Cmp {
        let mut v = [false; 6];
        for (i, ch) in s.chars().enumerate().take(6) {
            v[i] = ch == '1';
        }
        Cmp(v)
    }
    fn lt(self) -> bool {
        self.0[0]
    }
    fn le(self) -> bool {
        self.0[1]
    }
    fn eq(self) -> bool {
        self.0[2]
    }
    fn ne(self) -> bool {
        self.0[3]
    }
    fn ge(self) -> bool {
        self.0[4]
    }
    fn gt(self) -> bool {
        self.0[5]
    }
}

fn c_add(o: &mut Oracle, a: &[u8], b: &[u8]) -> [u8; 10] {
    unhex10(&o.one(format!("add {} {}", hex10(a), hex10(b))))
}

fn c_mul(o: &mut Oracle, a: &[u8], b: &[u8]) -> [u8; 10] {
    unhex10(&o.one(format!("mul {} {}", hex10(a), hex10(b))))
}

fn c_cmp(o: &mut Oracle, a: &[u8], b: &[u8]) -> Cmp {
    Cmp::parse(&o.one(format!("cmp {} {}", hex10(a), hex10(b))))
}

fn c_truth(o: &mut Oracle, a: &[u8]) -> bool {
    c_cmp(o, a, &[0u8; 10]).ne()
}

fn c_cmul(o: &mut Oracle, x: &[u8], y: &[u8]) -> ([u8; 10], [u8; 10]) {
    let line = o.one(format!(
        "cmul {} {} {} {}",
        hex10(&x[..16]),
        hex10(&x[16..]),
        hex10(&y[..16]),
        hex10(&y[16..])
    ));
    let (re, im) = line.split_once(' ').expect("two parts");
    (unhex10(re), unhex10(im))
}

// ---------------------------------------------------------------------------
// Long double encodings on the test side.

const ONE80: [u8; 10] = f80(0x3fff, 1 << 63);

const fn f80(sexp: u16, mant: u64) -> [u8; 10] {
    let m = mant.to_le_bytes();
    let s = sexp.to_le_bytes();
    [m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], s[0], s[1]]
}

fn f80_parts(b: &[u8]) -> (u16, u64) {
    let mut m = [0u8; 8];
    m.copy_from_slice(&b[..8]);
    (u16::from_le_bytes([b[8], b[9]]), u64::from_le_bytes(m))
}

fn f80_is_nan(b: &[u8]) -> bool {
    let (sexp, mant) = f80_parts(b);
    sexp & 0x7fff == 0x7fff && mant >> 63 == 1 && mant << 1 != 0
}

fn f80_from_int(v: i64) -> [u8; 10] {
    if v == 0 {
        return f80(0, 0);
    }
    let sign = if v < 0 { 0x8000 } else { 0 };
    let mag = v.unsigned_abs();
    let lz = mag.leading_zeros();
    f80(sign | (16383 + 63 - lz) as u16, mag << lz)
}

/// Hand-picked long doubles: zeros, infinities, NaNs, denormals, the normal
/// range's ends, rounding-tie builders, and the encodings the x87 rejects.
fn f80_edges() -> Vec<[u8; 10]> {
    let top = 1u64 << 63;
    vec![
        f80(0, 0),
        f80(0x8000, 0),
        f80(0x7fff, top),
        f80(0xffff, top),
        f80(0x7fff, top | 1 << 62),
        f80(0xffff, top | 1 << 62 | 0x1234),
        f80(0x7fff, top | 1),
        f80(0xffff, top | 0xdead),
        f80(0, 1),
        f80(0x8000, 1),
        f80(0, top - 1),
        f80(0, top >> 1),
        f80(0, top),
        f80(0x8000, top | 5),
        f80(1, top),
        f80(0x8001, top | 1),
        f80(2, top),
        f80(0x7ffe, u64::MAX),
        f80(0xfffe, u64::MAX),
        f80(0x7ffe, top),
        ONE80,
        f80(0xbfff, top),
        f80(0x3fff, top | 1),
        f80(0x3fff, top | 3),
        f80(0x3ffe, u64::MAX),
        f80(0x3fff - 64, top),
        f80(0xbfff - 64, top),
        f80(0x3fff - 64, top | 1),
        f80(0x3fff - 65, top | 1 << 62),
        f80(0x3fff - 63, top),
        f80(0x4000, top | 1 << 62),
        f80(0x3fff - 8000, top | 7),
        f80(0x3fff + 8000, top | 9),
        f80(16383 + 62, u64::MAX),
        f80(0x3fff, 1 << 62),
        f80(0x7fff, 0),
        f80(0x7fff, 1 << 62),
        f80(0x7fff, 1),
        f80(0x1234, 0x1234),
    ]
}

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random long double, mostly finite, with a biased exponent near
/// `near` when given (so that sums round rather than absorb).
fn random_f80(rng: &mut SplitMix, near: Option<u16>) -> [u8; 10] {
    let top = 1u64 << 63;
    let sign = if rng.next() & 1 == 1 { 0x8000u16 } else { 0 };
    let mut mant = top | rng.next();
    // Short significands make exact ties and exact results likely.
    match rng.below(4) {
        0 => mant &= !((1u64 << rng.below(64)) - 1) | top,
        1 => mant &= !((1u64 << 40) - 1),
        _ => {}
    }
    let kind = rng.below(24);
    let exp: u16 = match kind {
        0 => return f80(sign, 0),
        1 => return f80(sign | 0x7fff, top),
        2 => return f80(sign | 0x7fff, top | 1 << 62 | rng.below(1 << 20)),
        3 => return f80(sign | 0x7fff, top | (rng.below(1 << 20) + 1)),
        4 => return f80(sign, (mant & !top) >> rng.below(64)),
        5 => return f80(sign, mant),
        6 => {
            let e = [0x7fff, rng.below(0x7fff) as u16 + 1][rng.below(2) as usize];
            return f80(sign | e, mant & !top);
        }
        7 => 0x7ffe - rng.below(3) as u16,
        8 => 1 + rng.below(70) as u16,
        9 | 10 => 0x3fff - 100 + rng.below(200) as u16,
        11 => 1 + rng.below(0x7ffe) as u16,
        _ => match near {
            Some(n) => {
                let d = rng.below(140) as i32 - 70;
                (i32::from(n & 0x7fff) + d).clamp(1, 0x7ffe) as u16
            }
            None => 0x3fff - 20 + rng.below(40) as u16,
        },
    };
    f80(sign | exp, mant)
}

fn random_pair(rng: &mut SplitMix) -> ([u8; 10], [u8; 10]) {
    let a = random_f80(rng, None);
    let near = Some(f80_parts(&a).0);
    let b = random_f80(rng, near);
    (a, b)
}

/// Packs ten-byte values into 16-byte elements with the given padding byte.
fn pack80(values: &[[u8; 10]], pad: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 16);
    for v in values {
        out.extend_from_slice(v);
        out.extend_from_slice(&[pad; 6]);
    }
    out
}

// ---------------------------------------------------------------------------
// Random elements for the property tests.

fn int_elem(size: usize) -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), size),
        (-4i128..=4).prop_map(move |v| v.to_le_bytes()[..size].to_vec()),
        prop::sample::select(vec![0x80u8, 0x7f, 0xff]).prop_map(move |top| {
            let mut b = vec![if top == 0x80 { 0 } else { 0xff }; size];
            b[size - 1] = top;
            b
        }),
    ]
    .boxed()
}

fn f32_elem() -> BoxedStrategy<Vec<u8>> {
    let specials = vec![
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
        f32::EPSILON,
    ];
    prop_oneof![
        any::<u32>().prop_map(f32::from_bits),
        prop::sample::select(specials),
        (-4i8..=4).prop_map(f32::from),
    ]
    .prop_map(|x| x.to_ne_bytes().to_vec())
    .boxed()
}

fn f64_elem() -> BoxedStrategy<Vec<u8>> {
    let specials = vec![
        0.0f64,
        -0.0,
        1.0,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        f64::EPSILON,
    ];
    prop_oneof![
        any::<u64>().prop_map(f64::from_bits),
        prop::sample::select(specials),
        (-4i8..=4).prop_map(f64::from),
    ]
    .prop_map(|x| x.to_ne_bytes().to_vec())
    .boxed()
}

fn f80_elem() -> BoxedStrategy<Vec<u8>> {
    let value = prop_oneof![
        any::<u64>().prop_map(|seed| random_f80(&mut SplitMix(seed), None)),
        prop::sample::select(f80_edges()),
        (-4i64..=4).prop_map(f80_from_int),
        any::<[u8; 10]>(),
    ];
    (value, any::<[u8; 6]>())
        .prop_map(|(v, pad)| {
            let mut b = v.to_vec();
            b.extend_from_slice(&pad);
            b
        })
        .boxed()
}

fn elem(dt: u32) -> BoxedStrategy<Vec<u8>> {
    let pair = |s: BoxedStrategy<Vec<u8>>| {
        (s.clone(), s)
            .prop_map(|(mut re, im)| {
                re.extend_from_slice(&im);
                re
            })
            .boxed()
    };
    match dt {
        FI_FLOAT => f32_elem(),
        FI_DOUBLE => f64_elem(),
        FI_LONG_DOUBLE => f80_elem(),
        FI_FLOAT_COMPLEX => pair(f32_elem()),
        FI_DOUBLE_COMPLEX => pair(f64_elem()),
        FI_LONG_DOUBLE_COMPLEX => pair(f80_elem()),
        _ => int_elem(size_of(dt)),
    }
}

/// Target, operand and compare elements plus per-element aliasing flags
/// (bit 0: compare := target, bit 1: operand := target, bit 2 of the first:
/// leave the operand empty for FI_ATOMIC_READ).
type Case = (Vec<Vec<u8>>, Vec<Vec<u8>>, Vec<Vec<u8>>, Vec<u8>);

fn case(dt: u32) -> impl Strategy<Value = Case> {
    (1usize..8).prop_flat_map(move |n| {
        (
            vec(elem(dt), n),
            vec(elem(dt), n),
            vec(elem(dt), n),
            vec(any::<u8>(), n),
        )
    })
}

// ---------------------------------------------------------------------------
// The reference model.

fn int_model(op: u32, dt: u32, t: &[u8], o: &[u8], c: &[u8]) -> Vec<u8> {
    let size = t.len();
    let signed = matches!(dt, FI_INT8 | FI_INT16 | FI_INT32 | FI_INT64 | FI_INT128);
    let bits = 8 * size as u32;
    let mask = if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    let raw = |b: &[u8]| {
        let mut a = [0u8; 16];
        a[..b.len()].copy_from_slice(b);
        u128::from_le_bytes(a)
    };
    let wide = |v: u128| -> i128 {
        if signed && bits < 128 {
            ((v << (128 - bits)) as i128) >> (128 - bits)
        } else {
            v as i128
        }
    };
    let lt = |a: u128, b: u128| if signed { wide(a) < wide(b) } else { a < b };
    let (t, o, c) = (
        raw(t),
        if o.is_empty() { 0 } else { raw(o) },
        if c.is_empty() { 0 } else { raw(c) },
    );
    let new = match op {
        FI_MIN => {
            if lt(o, t) {
                o
            } else {
                t
            }
        }
        FI_MAX => {
            if lt(t, o) {
                o
            } else {
                t
            }
        }
        FI_SUM => t.wrapping_add(o),
        FI_PROD => t.wrapping_mul(o),
        FI_LOR => u128::from(t != 0 || o != 0),
        FI_LAND => u128::from(t != 0 && o != 0),
        FI_LXOR => u128::from((t != 0) ^ (o != 0)),
        FI_BOR => t | o,
        FI_BAND => t & o,
        FI_BXOR => t ^ o,
        FI_ATOMIC_READ => t,
        FI_ATOMIC_WRITE => o,
        FI_CSWAP => [t, o][usize::from(c == t)],
        FI_CSWAP_NE => [t, o][usize::from(c != t)],
        FI_CSWAP_LE => [t, o][usize::from(!lt(t, c))],
        FI_CSWAP_LT => [t, o][usize::from(lt(c, t))],
        FI_CSWAP_GE => [t, o][usize::from(!lt(c, t))],
        FI_CSWAP_GT => [t, o][usize::from(lt(t, c))],
        FI_MSWAP => (o & c) | (t & !c),
        _ => unreachable!("op {op}"),
    };
    (new & mask).to_le_bytes()[..size].to_vec()
}

/// Real floats in native Rust arithmetic.
fn real_model<T>(op: u32, t: T, o: T, c: T) -> T
where
    T: Copy + PartialOrd + From<u8> + std::ops::Add<Output = T> + std::ops::Mul<Output = T>,
{
    let zero = T::from(0);
    let flag = |b: bool| T::from(u8::from(b));
    match op {
        FI_MIN => {
            if o < t {
                o
            } else {
                t
            }
        }
        FI_MAX => {
            if o > t {
                o
            } else {
                t
            }
        }
        FI_SUM => t + o,
        FI_PROD => t * o,
        FI_LOR => flag(t != zero || o != zero),
        FI_LAND => flag(t != zero && o != zero),
        FI_LXOR => flag((t != zero) != (o != zero)),
        FI_ATOMIC_READ => t,
        FI_ATOMIC_WRITE => o,
        FI_CSWAP => [t, o][usize::from(c == t)],
        FI_CSWAP_NE => [t, o][usize::from(c != t)],
        FI_CSWAP_LE => [t, o][usize::from(c <= t)],
        FI_CSWAP_LT => [t, o][usize::from(c < t)],
        FI_CSWAP_GE => [t, o][usize::from(c >= t)],
        FI_CSWAP_GT => [t, o][usize::from(c > t)],
        _ => unreachable!("op {op}"),
    }
}

/// Complex floats in native Rust arithmetic.
fn complex_model<T>(op: u32, t: (T, T), o: (T, T), c: (T, T)) -> (T, T)
where
    T: Copy
        + PartialOrd
        + From<u8>
        + std::ops::Add<Output = T>
        + std::ops::Sub<Output = T>
        + std::ops::Mul<Output = T>,
{
    let zero = T::from(0);
    let truth = |x: (T, T)| x.0 != zero || x.1 != zero;
    let flag = |b: bool| (T::from(u8::from(b)), zero);
    let eq = |a: (T, T), b: (T, T)| a.0 == b.0 && a.1 == b.1;
    match op {
        FI_SUM => (t.0 + o.0, t.1 + o.1),
        FI_PROD => (t.0 * o.0 - t.1 * o.1, t.0 * o.1 + t.1 * o.0),
        FI_LOR => flag(truth(t) || truth(o)),
        FI_LAND => flag(truth(t) && truth(o)),
        FI_LXOR => flag(truth(t) != truth(o)),
        FI_ATOMIC_READ => t,
        FI_ATOMIC_WRITE => o,
        FI_CSWAP => [t, o][usize::from(eq(c, t))],
        FI_CSWAP_NE => [t, o][usize::from(!eq(c, t))],
        _ => unreachable!("op {op}"),
    }
}

/// Long doubles through the C oracle; the target's padding is kept.
fn f80_model(op: u32, t: &[u8], o: &[u8], c: &[u8]) -> Vec<u8> {
    let mut or = oracle();
    let pick = |b: bool| {
        if b {
            o[..10].to_vec()
        } else {
            t[..10].to_vec()
        }
    };
    let one_or_zero = |b: bool| if b { ONE80.to_vec() } else { vec![0u8; 10] };
    let value = match op {
        FI_MIN => pick(c_cmp(&mut or, o, t).lt()),
        FI_MAX => pick(c_cmp(&mut or, o, t).gt()),
        FI_SUM => c_add(&mut or, t, o).to_vec(),
        FI_PROD => c_mul(&mut or, t, o).to_vec(),
        FI_LOR => one_or_zero(c_truth(&mut or, t) || c_truth(&mut or, o)),
        FI_LAND => one_or_zero(c_truth(&mut or, t) && c_truth(&mut or, o)),
        FI_LXOR => one_or_zero(c_truth(&mut or, t) != c_truth(&mut or, o)),
        FI_ATOMIC_READ => t[..10].to_vec(),
        FI_ATOMIC_WRITE => o[..10].to_vec(),
        FI_CSWAP => pick(c_cmp(&mut or, c, t).eq()),
        FI_CSWAP_NE => pick(c_cmp(&mut or, c, t).ne()),
        FI_CSWAP_LE => pick(c_cmp(&mut or, c, t).le()),
        FI_CSWAP_LT => pick(c_cmp(&mut or, c, t).lt()),
        FI_CSWAP_GE => pick(c_cmp(&mut or, c, t).ge()),
        FI_CSWAP_GT => pick(c_cmp(&mut or, c, t).gt()),
        _ => unreachable!("op {op}"),
    };
    let mut out = t.to_vec();
    out[..10].copy_from_slice(&value);
    out
}

fn c80_model(op: u32, t: &[u8], o: &[u8], c: &[u8]) -> Vec<u8> {
    let (tr, ti) = t.split_at(16);
    let (or_, oi) = o.split_at(16);
    let mut out = t.to_vec();
    let (re, im): (Vec<u8>, Vec<u8>) = {
        let mut orc = oracle();
        let truth = |orc: &mut Oracle, x: &[u8]| c_truth(orc, &x[..16]) || c_truth(orc, &x[16..]);
        let eq = |orc: &mut Oracle, a: &[u8], b: &[u8]| {
            c_cmp(orc, &a[..16], &b[..16]).eq() && c_cmp(orc, &a[16..], &b[16..]).eq()
        };
        let flag = |b: bool| (if b { ONE80.to_vec() } else { vec![0; 10] }, vec![0; 10]);
        let whole = |x: &[u8]| (x[..10].to_vec(), x[16..26].to_vec());
        match op {
            FI_SUM => (
                c_add(&mut orc, tr, or_).to_vec(),
                c_add(&mut orc, ti, oi).to_vec(),
            ),
            FI_PROD => {
                let (re, im) = c_cmul(&mut orc, t, o);
                (re.to_vec(), im.to_vec())
            }
            FI_LOR => flag(truth(&mut orc, t) || truth(&mut orc, o)),
            FI_LAND => flag(truth(&mut orc, t) && truth(&mut orc, o)),
            FI_LXOR => flag(truth(&mut orc, t) != truth(&mut orc, o)),
            FI_ATOMIC_READ => whole(t),
            FI_ATOMIC_WRITE => whole(o),
            FI_CSWAP => whole(if eq(&mut orc, c, t) { o } else { t }),
            FI_CSWAP_NE => whole(if eq(&mut orc, c, t) { t } else { o }),
            _ => unreachable!("op {op}"),
        }
    };
    out[..10].copy_from_slice(&re);
    out[16..26].copy_from_slice(&im);
    out
}

fn get_f32(b: &[u8]) -> f32 {
    f32::from_ne_bytes([b[0], b[1], b[2], b[3]])
}

fn get_f64(b: &[u8]) -> f64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    f64::from_ne_bytes(a)
}

/// The model's new value of one target element.
fn model_elem(op: u32, dt: u32, t: &[u8], o: &[u8], c: &[u8]) -> Vec<u8> {
    // FI_ATOMIC_READ may come without an operand; any value does.
    let o = if o.is_empty() { t } else { o };
    let c = if c.is_empty() { t } else { c };
    match dt {
        FI_FLOAT => real_model(op, get_f32(t), get_f32(o), get_f32(c))
            .to_ne_bytes()
            .to_vec(),
        FI_DOUBLE => real_model(op, get_f64(t), get_f64(o), get_f64(c))
            .to_ne_bytes()
            .to_vec(),
        FI_FLOAT_COMPLEX => {
            let p = |b: &[u8]| (get_f32(b), get_f32(&b[4..]));
            let (re, im) = complex_model(op, p(t), p(o), p(c));
            [re.to_ne_bytes(), im.to_ne_bytes()].concat()
        }
        FI_DOUBLE_COMPLEX => {
            let p = |b: &[u8]| (get_f64(b), get_f64(&b[8..]));
            let (re, im) = complex_model(op, p(t), p(o), p(c));
            [re.to_ne_bytes(), im.to_ne_bytes()].concat()
        }
        FI_LONG_DOUBLE => f80_model(op, t, o, c),
        FI_LONG_DOUBLE_COMPLEX => c80_model(op, t, o, c),
        _ => int_model(op, dt, t, o, c),
    }
}

/// Equal, except that two NaNs match whatever their payloads.
fn same_elem(dt: u32, got: &[u8], want: &[u8]) -> bool {
    match dt {
        FI_FLOAT | FI_FLOAT_COMPLEX => got
            .chunks(4)
            .zip(want.chunks(4))
            .all(|(g, w)| g == w || (get_f32(g).is_nan() && get_f32(w).is_nan())),
        FI_DOUBLE | FI_DOUBLE_COMPLEX => got
            .chunks(8)
            .zip(want.chunks(8))
            .all(|(g, w)| g == w || (get_f64(g).is_nan() && get_f64(w).is_nan())),
        FI_LONG_DOUBLE | FI_LONG_DOUBLE_COMPLEX => {
            got.chunks(16).zip(want.chunks(16)).all(|(g, w)| {
                g[10..] == w[10..] && (g[..10] == w[..10] || (f80_is_nan(g) && f80_is_nan(w)))
            })
        }
        _ => got == want,
    }
}

fn name(kind: AtomicKind, op: u32, dt: u32) -> String {
    let op_name = ofi_core::consts::enum_name(ofi_core::consts::ATOMIC_OP_NAMES, op).unwrap_or("?");
    let dt_name = ofi_core::consts::enum_name(ofi_core::consts::DATATYPE_NAMES, dt).unwrap_or("?");
    format!("{kind:?} {op_name} {dt_name}")
}

fn check_case(kind: AtomicKind, op: u32, dt: u32, case: Case) -> Result<(), TestCaseError> {
    let (ts, mut os, mut cs, flags) = case;
    for (i, f) in flags.iter().enumerate() {
        if f & 1 != 0 {
            cs[i] = ts[i].clone();
        }
        if f & 2 != 0 {
            os[i] = ts[i].clone();
        }
    }
    let original: Vec<u8> = ts.concat();
    let mut target = original.clone();
    let operand: Vec<u8> = if op == FI_ATOMIC_READ && flags[0] & 4 != 0 {
        Vec::new()
    } else {
        os.concat()
    };
    let compare: Vec<u8> = if kind == AtomicKind::Compare {
        cs.concat()
    } else {
        Vec::new()
    };
    let mut result = if kind == AtomicKind::Basic {
        Vec::new()
    } else {
        vec![0xa5; target.len()]
    };
    apply(kind, op, dt, &mut target, &operand, &compare, &mut result)
        .map_err(|e| TestCaseError::fail(format!("apply failed: {e}")))?;
    if kind != AtomicKind::Basic {
        prop_assert_eq!(
            &result,
            &original,
            "the result must hold the original target"
        );
    }
    let s = size_of(dt);
    for i in 0..ts.len() {
        let pick = |b: &[u8]| {
            if b.is_empty() {
                Vec::new()
            } else {
                b[i * s..(i + 1) * s].to_vec()
            }
        };
        let want = model_elem(op, dt, &ts[i], &pick(&operand), &pick(&compare));
        let got = &target[i * s..(i + 1) * s];
        prop_assert!(
            same_elem(dt, got, &want),
            "element {}: target {:02x?} operand {:02x?} compare {:02x?}: got {:02x?}, model {:02x?}",
            i,
            ts[i],
            pick(&operand),
            pick(&compare),
            got,
            want
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Tests.

#[test]
fn matrix_matches_libfabric() {
    for kind in KINDS {
        for op in 0..FI_ATOMIC_OP_LAST + 4 {
            let expected = expected_datatypes(kind, op);
            for dt in 0..FI_DATATYPE_COUNT + 4 {
                assert_eq!(
                    valid(kind, op, dt),
                    expected.contains(&dt),
                    "valid({})",
                    name(kind, op, dt)
                );
            }
        }
    }
    assert_eq!(valid_triples().len(), 152 + 168 + 94);
}

#[test]
fn datatype_sizes() {
    for dt in 0..FI_DATATYPE_COUNT {
        assert_eq!(datatype_size(dt), Some(size_of(dt)), "datatype {dt}");
        assert!(is_supported_datatype(dt));
    }
    for dt in [FI_DATATYPE_COUNT, FI_DATATYPE_COUNT + 1, 100, u32::MAX] {
        assert_eq!(datatype_size(dt), None);
        assert!(!is_supported_datatype(dt));
    }
}

#[test]
fn query_counts_elements() {
    for (kind, op, dt) in valid_triples() {
        let s = size_of(dt);
        assert_eq!(
            query(kind, op, dt, 4096).ok(),
            Some(4096 / s),
            "{}",
            name(kind, op, dt)
        );
        assert_eq!(query(kind, op, dt, s - 1).ok(), Some(0));
        assert_eq!(query(kind, op, dt, 4 * s - 1).ok(), Some(3));
    }
}

#[test]
fn every_valid_combination_matches_the_model() {
    let triples = valid_triples();
    for (kind, op, dt) in triples {
        let config = Config {
            cases: 48,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner = TestRunner::new(config);
        if let Err(e) = runner.run(&case(dt), |c| check_case(kind, op, dt, c)) {
            panic!("{}: {e}", name(kind, op, dt));
        }
    }
}

#[test]
fn invalid_combinations_are_refused_untouched() {
    let mut refused = 0;
    for kind in KINDS {
        for op in 0..FI_ATOMIC_OP_LAST + 3 {
            let expected = expected_datatypes(kind, op);
            for dt in (0..FI_DATATYPE_COUNT + 3).chain([u32::MAX]) {
                if expected.contains(&dt) {
                    continue;
                }
                refused += 1;
                let what = name(kind, op, dt);
                let err = query(kind, op, dt, 1024).expect_err(&what);
                assert_eq!(err.code(), errno::FI_EOPNOTSUPP, "{what}");
                let len = 2 * datatype_size(dt).unwrap_or(8);
                let mut target: Vec<u8> = (0..len as u8).collect();
                let operand = vec![1u8; len];
                let compare = if kind == AtomicKind::Compare {
                    vec![2u8; len]
                } else {
                    Vec::new()
                };
                let mut result = if kind == AtomicKind::Basic {
                    Vec::new()
                } else {
                    vec![0xeeu8; len]
                };
                let before = (target.clone(), result.clone());
                let err = apply(kind, op, dt, &mut target, &operand, &compare, &mut result)
                    .expect_err(&what);
                assert_eq!(err.code(), errno::FI_EOPNOTSUPP, "{what}: {err}");
                assert_eq!((target, result), before, "{what} touched its buffers");
            }
        }
    }
    assert!(refused > 0);
}

#[test]
fn mismatched_buffers_are_refused_untouched() {
    for (kind, op, dt) in valid_triples() {
        let what = name(kind, op, dt);
        let s = size_of(dt);
        let n = 2 * s;
        let good_compare = if kind == AtomicKind::Compare { n } else { 0 };
        let good_result = if kind == AtomicKind::Basic { 0 } else { n };
        // (target, operand, compare, result) lengths that must fail.
        let mut shapes = vec![
            (n, n + s, good_compare, good_result),
            (n, s, good_compare, good_result),
            (n, n, good_compare + s, good_result),
            (n, n, good_compare, good_result + s),
            (n, n, good_compare, n - s),
        ];
        if s > 1 {
            shapes.push((
                n + 1,
                n + 1,
                good_compare + usize::from(good_compare > 0),
                good_result + usize::from(good_result > 0),
            ));
            shapes.push((
                n - 1,
                n - 1,
                good_compare.saturating_sub(1),
                good_result.saturating_sub(1),
            ));
        }
        if kind == AtomicKind::Compare {
            shapes.push((n, n, 0, good_result));
        }
        if kind != AtomicKind::Basic {
            shapes.push((n, n, good_compare, 0));
        }
        for (t, o, c, r) in shapes {
            let mut target: Vec<u8> = (0..t).map(|i| i as u8).collect();
            let operand = vec![3u8; o];
            let compare = vec![3u8; c];
            let mut result = vec![0x5au8; r];
            let before = (target.clone(), result.clone());
            let err = apply(kind, op, dt, &mut target, &operand, &compare, &mut result)
                .expect_err(&format!("{what} with lengths {t}/{o}/{c}/{r}"));
            assert_eq!(err.code(), errno::FI_EINVAL, "{what}: {err}");
            assert_eq!((target, result), before, "{what} touched its buffers");
        }
        // The well-formed shape works, and so does an empty one.
        let mut target = vec![0u8; n];
        let mut result = vec![0u8; good_result];
        apply(
            kind,
            op,
            dt,
            &mut target,
            &vec![0; n],
            &vec![0; good_compare],
            &mut result,
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        apply(kind, op, dt, &mut [], &[], &[], &mut []).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    // FI_ATOMIC_READ takes no operand, or one of the target's length.
    let mut target = [7u8; 16];
    let mut result = [0u8; 16];
    apply(
        AtomicKind::Fetch,
        FI_ATOMIC_READ,
        FI_UINT64,
        &mut target,
        &[],
        &[],
        &mut result,
    )
    .expect("read without operand");
    assert_eq!(result, target);
    let err = apply(
        AtomicKind::Fetch,
        FI_ATOMIC_READ,
        FI_UINT64,
        &mut target,
        &[0; 8],
        &[],
        &mut result,
    )
    .expect_err("short operand");
    assert_eq!(err.code(), errno::FI_EINVAL);
}

#[test]
fn integer_spot_checks() {
    let mut t = 5u64.to_ne_bytes();
    let mut r = [0u8; 8];
    apply(
        AtomicKind::Fetch,
        FI_SUM,
        FI_UINT64,
        &mut t,
        &u64::MAX.to_ne_bytes(),
        &[],
        &mut r,
    )
    .unwrap();
    assert_eq!((u64::from_ne_bytes(t), u64::from_ne_bytes(r)), (4, 5));
    // FI_CSWAP_LE swaps when compare <= target.
    let mut t = 10i32.to_ne_bytes();
    let mut r = [0u8; 4];
    apply(
        AtomicKind::Compare,
        FI_CSWAP_LE,
        FI_INT32,
        &mut t,
        &99i32.to_ne_bytes(),
        &(-3i32).to_ne_bytes(),
        &mut r,
    )
    .unwrap();
    assert_eq!(i32::from_ne_bytes(t), 99);
    // FI_MSWAP: compare is the mask.
    let mut t = [0b1010_1010u8];
    let mut r = [0u8];
    apply(
        AtomicKind::Compare,
        FI_MSWAP,
        FI_UINT8,
        &mut t,
        &[0b0101_0101],
        &[0b0000_1111],
        &mut r,
    )
    .unwrap();
    assert_eq!(t, [0b1010_0101]);
    // Unaligned elements.
    let mut buf = [0u8; 17];
    buf[1..9].copy_from_slice(&7u64.to_ne_bytes());
    buf[9..17].copy_from_slice(&9u64.to_ne_bytes());
    apply(
        AtomicKind::Basic,
        FI_PROD,
        FI_UINT64,
        &mut buf[1..],
        &[3u64.to_ne_bytes(), 2u64.to_ne_bytes()].concat(),
        &[],
        &mut [],
    )
    .unwrap();
    assert_eq!(u64::from_ne_bytes(buf[1..9].try_into().unwrap()), 21);
    assert_eq!(u64::from_ne_bytes(buf[9..17].try_into().unwrap()), 18);
}

#[test]
fn float_spot_checks() {
    // FI_CSWAP compares numerically: -0 == +0, NaN never equal.
    let mut t = (-0.0f64).to_ne_bytes();
    let mut r = [0u8; 8];
    apply(
        AtomicKind::Compare,
        FI_CSWAP,
        FI_DOUBLE,
        &mut t,
        &1.5f64.to_ne_bytes(),
        &0.0f64.to_ne_bytes(),
        &mut r,
    )
    .unwrap();
    assert_eq!(f64::from_ne_bytes(t), 1.5);
    let mut t = f64::NAN.to_ne_bytes();
    apply(
        AtomicKind::Compare,
        FI_CSWAP,
        FI_DOUBLE,
        &mut t,
        &1.5f64.to_ne_bytes(),
        &f64::NAN.to_ne_bytes(),
        &mut r,
    )
    .unwrap();
    assert!(f64::from_ne_bytes(t).is_nan());
    // Complex product.
    let c = |re: f32, im: f32| [re.to_ne_bytes(), im.to_ne_bytes()].concat();
    let mut t = c(1.0, 2.0);
    apply(
        AtomicKind::Basic,
        FI_PROD,
        FI_FLOAT_COMPLEX,
        &mut t,
        &c(3.0, 4.0),
        &[],
        &mut [],
    )
    .unwrap();
    assert_eq!(t, c(-5.0, 10.0));
    // Logical ops store 1 or 0, NaN is true.
    let mut t = f32::NAN.to_ne_bytes();
    apply(
        AtomicKind::Basic,
        FI_LAND,
        FI_FLOAT,
        &mut t,
        &2.0f32.to_ne_bytes(),
        &[],
        &mut [],
    )
    .unwrap();
    assert_eq!(f32::from_ne_bytes(t), 1.0);
}

#[test]
fn long_double_padding_is_preserved() {
    let mut target = pack80(&[ONE80, f80_from_int(3)], 0xcd);
    let operand = pack80(&[f80_from_int(2), f80_from_int(4)], 0x11);
    let mut result = vec![0u8; 32];
    apply(
        AtomicKind::Fetch,
        FI_SUM,
        FI_LONG_DOUBLE,
        &mut target,
        &operand,
        &[],
        &mut result,
    )
    .unwrap();
    assert_eq!(target, pack80(&[f80_from_int(3), f80_from_int(7)], 0xcd));
    assert_eq!(result, pack80(&[ONE80, f80_from_int(3)], 0xcd));
    apply(
        AtomicKind::Basic,
        FI_ATOMIC_WRITE,
        FI_LONG_DOUBLE,
        &mut target,
        &operand,
        &[],
        &mut [],
    )
    .unwrap();
    assert_eq!(target, pack80(&[f80_from_int(2), f80_from_int(4)], 0xcd));
}

/// Runs one long double op over many (target, operand) pairs in one call.
fn f80_apply(
    kind: AtomicKind,
    op: u32,
    targets: &[[u8; 10]],
    operands: &[[u8; 10]],
    compares: &[[u8; 10]],
) -> Vec<[u8; 10]> {
    let mut target = pack80(targets, 0x77);
    let operand = pack80(operands, 0x33);
    let compare = pack80(compares, 0x44);
    let mut result = if kind == AtomicKind::Basic {
        Vec::new()
    } else {
        vec![0u8; target.len()]
    };
    apply(
        kind,
        op,
        FI_LONG_DOUBLE,
        &mut target,
        &operand,
        &compare,
        &mut result,
    )
    .expect("apply");
    target
        .chunks(16)
        .map(|c| {
            assert_eq!(c[10..], [0x77; 6], "padding changed");
            let mut v = [0u8; 10];
            v.copy_from_slice(&c[..10]);
            v
        })
        .collect()
}

fn show(v: &[u8]) -> String {
    let (sexp, mant) = f80_parts(v);
    format!("{sexp:04x}:{mant:016x}")
}

/// A compare-form op, its C operator, and the oracle's answer for it.
type Condition = (u32, &'static str, fn(Cmp) -> bool);

/// Bit-equal, or both NaN (payloads counted separately).
fn f80_match(got: &[u8; 10], want: &[u8; 10], payload_diffs: &mut usize) -> bool {
    if got == want {
        return true;
    }
    if f80_is_nan(got) && f80_is_nan(want) {
        *payload_diffs += 1;
        return true;
    }
    false
}

#[test]
fn long_double_matches_the_c_compiler() {
    let mut rng = SplitMix(0x0f1a_7011_c0de_5eed);
    let edges = f80_edges();
    let mut pairs: Vec<([u8; 10], [u8; 10])> = Vec::new();
    for a in &edges {
        for b in &edges {
            pairs.push((*a, *b));
        }
    }
    for _ in 0..4000 {
        pairs.push(random_pair(&mut rng));
    }
    let a: Vec<[u8; 10]> = pairs.iter().map(|p| p.0).collect();
    let b: Vec<[u8; 10]> = pairs.iter().map(|p| p.1).collect();

    let mut or = oracle();
    let req = |op: &str| -> Vec<String> {
        pairs
            .iter()
            .map(|(x, y)| format!("{op} {} {}", hex10(x), hex10(y)))
            .collect()
    };
    let sums = or.ask(&req("add"));
    let prods = or.ask(&req("mul"));
    let cmps: Vec<Cmp> = or.ask(&req("cmp")).iter().map(|s| Cmp::parse(s)).collect();
    let truths: Vec<bool> = or
        .ask(
            &a.iter()
                .map(|x| format!("cmp {} {}", hex10(x), hex10(&[0; 10])))
                .collect::<Vec<_>>(),
        )
        .iter()
        .map(|s| Cmp::parse(s).ne())
        .collect();
    drop(or);

    let mut payload_diffs = 0;
    let mut failures = Vec::new();
    let got_sum = f80_apply(AtomicKind::Basic, FI_SUM, &a, &b, &[]);
    let got_prod = f80_apply(AtomicKind::Fetch, FI_PROD, &a, &b, &[]);
    for i in 0..pairs.len() {
        for (what, got, want) in [("+", &got_sum[i], &sums[i]), ("*", &got_prod[i], &prods[i])] {
            let want = unhex10(want);
            if !f80_match(got, &want, &mut payload_diffs) {
                failures.push(format!(
                    "{} {what} {}: got {}, cc {}",
                    show(&a[i]),
                    show(&b[i]),
                    show(got),
                    show(&want)
                ));
            }
        }
    }

    // Comparisons, each through the operation that uses it: swapping in a
    // marker shows whether the condition held.
    let marker = f80(0x7fff, 0xc000_5a5a_5a5a_5a5a);
    let markers = vec![marker; pairs.len()];
    let swapped = |op: u32| -> Vec<bool> {
        // compare = a, target = b: the swap happens when `a <cond> b`.
        f80_apply(AtomicKind::Compare, op, &b, &markers, &a)
            .iter()
            .map(|v| *v == marker)
            .collect()
    };
    let conds: [Condition; 6] = [
        (FI_CSWAP, "==", Cmp::eq),
        (FI_CSWAP_NE, "!=", Cmp::ne),
        (FI_CSWAP_LE, "<=", Cmp::le),
        (FI_CSWAP_LT, "<", Cmp::lt),
        (FI_CSWAP_GE, ">=", Cmp::ge),
        (FI_CSWAP_GT, ">", Cmp::gt),
    ];
    for (op, sym, cond) in conds {
        let got = swapped(op);
        for i in 0..pairs.len() {
            if got[i] != cond(cmps[i]) {
                failures.push(format!(
                    "{} {sym} {}: got {}, cc {}",
                    show(&a[i]),
                    show(&b[i]),
                    got[i],
                    cond(cmps[i])
                ));
            }
        }
    }
    // FI_MIN / FI_MAX with target = b, operand = a.
    let mins = f80_apply(AtomicKind::Basic, FI_MIN, &b, &a, &[]);
    let maxs = f80_apply(AtomicKind::Basic, FI_MAX, &b, &a, &[]);
    for i in 0..pairs.len() {
        let want_min = if cmps[i].lt() { a[i] } else { b[i] };
        let want_max = if cmps[i].gt() { a[i] } else { b[i] };
        if mins[i] != want_min || maxs[i] != want_max {
            failures.push(format!("min/max of {} {}", show(&b[i]), show(&a[i])));
        }
    }
    // Truth (FI_LOR with a zero operand).
    let zeros = vec![[0u8; 10]; pairs.len()];
    let lor = f80_apply(AtomicKind::Basic, FI_LOR, &a, &zeros, &[]);
    for i in 0..pairs.len() {
        let want = if truths[i] { ONE80 } else { [0; 10] };
        if lor[i] != want {
            failures.push(format!("truth of {}: got {}", show(&a[i]), show(&lor[i])));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches with cc's long double, first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!(
        "long double: {} pairs x (add, mul, 6 comparisons, min, max, truth) match cc; \
         NaN payload differences: {payload_diffs}",
        pairs.len()
    );
}

#[test]
fn long_double_complex_product_matches_the_c_compiler() {
    let mut rng = SplitMix(0xc0_4d1e_f00d);
    let edges = f80_edges();
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for i in 0..3000 {
        let pick = |rng: &mut SplitMix| {
            if i % 4 == 0 {
                edges[rng.below(edges.len() as u64) as usize]
            } else {
                random_f80(rng, Some(0x3fff))
            }
        };
        xs.push([pick(&mut rng), pick(&mut rng)]);
        ys.push([pick(&mut rng), pick(&mut rng)]);
    }
    let requests: Vec<String> = xs
        .iter()
        .zip(&ys)
        .map(|(x, y)| {
            format!(
                "cmul {} {} {} {}",
                hex10(&x[0]),
                hex10(&x[1]),
                hex10(&y[0]),
                hex10(&y[1])
            )
        })
        .collect();
    let answers = oracle().ask(&requests);
    let flat = |v: &[[[u8; 10]; 2]]| -> Vec<[u8; 10]> { v.iter().flatten().copied().collect() };
    let mut target = pack80(&flat(&xs), 0x99);
    let operand = pack80(&flat(&ys), 0x66);
    let mut result = vec![0u8; target.len()];
    apply(
        AtomicKind::Fetch,
        FI_PROD,
        FI_LONG_DOUBLE_COMPLEX,
        &mut target,
        &operand,
        &[],
        &mut result,
    )
    .unwrap();
    assert_eq!(result, pack80(&flat(&xs), 0x99));
    let mut payload_diffs = 0;
    let mut failures = Vec::new();
    for (i, ans) in answers.iter().enumerate() {
        let (re, im) = ans.split_once(' ').expect("two parts");
        let el = &target[32 * i..32 * (i + 1)];
        let mut got_re = [0u8; 10];
        let mut got_im = [0u8; 10];
        got_re.copy_from_slice(&el[..10]);
        got_im.copy_from_slice(&el[16..26]);
        assert_eq!(el[10..16], [0x99; 6]);
        assert_eq!(el[26..32], [0x99; 6]);
        if !f80_match(&got_re, &unhex10(re), &mut payload_diffs)
            || !f80_match(&got_im, &unhex10(im), &mut payload_diffs)
        {
            failures.push(format!(
                "({}, {}) * ({}, {}): got ({}, {}), cc ({re}, {im})",
                show(&xs[i][0]),
                show(&xs[i][1]),
                show(&ys[i][0]),
                show(&ys[i][1]),
                show(&got_re),
                show(&got_im)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!(
        "long double complex: {} products match cc; NaN payload differences: {payload_diffs}",
        xs.len()
    );
}
