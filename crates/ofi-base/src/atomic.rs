//! The atomic-operation engine: which (call kind, operation, datatype)
//! combinations exist, and their elementwise application to native-endian
//! byte buffers. Providers run it on the target side of an atomic request.
//!
//! The supported matrix is libfabric's:
//!
//! | operation                                   | datatypes                        |
//! |---------------------------------------------|----------------------------------|
//! | `FI_MIN`, `FI_MAX`                          | integers, float, double, long double |
//! | `FI_SUM`, `FI_PROD`, `FI_LOR`, `FI_LAND`, `FI_LXOR`, `FI_ATOMIC_WRITE` | all |
//! | `FI_BOR`, `FI_BAND`, `FI_BXOR`              | integers                         |
//! | `FI_ATOMIC_READ` (fetch only)               | all                              |
//! | `FI_CSWAP`, `FI_CSWAP_NE` (compare only)    | all                              |
//! | `FI_CSWAP_LE/LT/GE/GT` (compare only)       | integers, float, double, long double |
//! | `FI_MSWAP` (compare only)                   | integers                         |
//!
//! Base and fetch calls take the first three rows, fetch calls also
//! `FI_ATOMIC_READ`; compare calls take only the swap operations (the last
//! three rows). Everything else is `FI_EOPNOTSUPP`.
//!
//! Semantics follow `fi_atomic(3)` with C arithmetic: integer sums and
//! products wrap; floating-point results are IEEE round-to-nearest-even; a
//! comparison with NaN is false (so `FI_MIN`/`FI_MAX` keep the target and no
//! conditional swap happens); `FI_CSWAP` compares numerically (`-0 == +0`,
//! NaN equals nothing); logical operations treat any non-zero value
//! (including NaN) as true and store 1 or 0; a complex value is true when
//! either part is non-zero, and complex products are
//! `(ac - bd) + (ad + bc)i` without C99 Annex G infinity recovery.
//!
//! `FI_LONG_DOUBLE` is the x86-64 80-bit extended format in 16 bytes,
//! computed in software here with the x87 unit's results: the
//! same rounding, NaN selection, and invalid-encoding handling. Operations
//! write only the ten value bytes of a long double, so the six padding bytes
//! of each target element keep whatever they held; fetch results receive all
//! sixteen original bytes.
#![forbid(unsafe_code)]

use std::cmp::Ordering;

use crate::consts::atomic_op::*;
use crate::consts::datatype::*;
use crate::consts::{enum_name, ATOMIC_OP_NAMES, DATATYPE_NAMES};
use crate::error::{errno, Error, Result};

/// Which call family: fi_atomic (Basic), fi_fetch_atomic (Fetch), fi_compare_atomic (Compare).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicKind {
    /// `fi_atomic`: update the target, return nothing.
    Basic,
    /// `fi_fetch_atomic`: update the target, return its original value.
    Fetch,
    /// `fi_compare_atomic`: conditional swap, return the original value.
    Compare,
}

/// What a datatype supports.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    /// Integers: everything.
    Int,
    /// float, double, long double: no bitwise operations.
    Real,
    /// Complex types: no ordering, no bitwise operations.
    Complex,
}

const fn family(dt: u32) -> Option<Family> {
    match dt {
        FI_INT8..=FI_UINT64 | FI_INT128 | FI_UINT128 => Some(Family::Int),
        FI_FLOAT | FI_DOUBLE | FI_LONG_DOUBLE => Some(Family::Real),
        FI_FLOAT_COMPLEX | FI_DOUBLE_COMPLEX | FI_LONG_DOUBLE_COMPLEX => Some(Family::Complex),
        _ => None,
    }
}

/// libfabric's rule for which datatypes an operation is defined on.
const fn defined(kind: AtomicKind, op: u32, dt: u32) -> bool {
    let (int, real) = match family(dt) {
        Some(Family::Int) => (true, true),
        Some(Family::Real) => (false, true),
        Some(Family::Complex) => (false, false),
        None => return false,
    };
    match kind {
        AtomicKind::Basic | AtomicKind::Fetch => match op {
            FI_MIN | FI_MAX => real,
            FI_SUM | FI_PROD | FI_LOR | FI_LAND | FI_LXOR | FI_ATOMIC_WRITE => true,
            FI_BOR | FI_BAND | FI_BXOR => int,
            FI_ATOMIC_READ => matches!(kind, AtomicKind::Fetch),
            _ => false,
        },
        AtomicKind::Compare => match op {
            FI_CSWAP | FI_CSWAP_NE => true,
            FI_CSWAP_LE | FI_CSWAP_LT | FI_CSWAP_GE | FI_CSWAP_GT => real,
            FI_MSWAP => int,
            _ => false,
        },
    }
}

const OPS: usize = FI_ATOMIC_OP_LAST as usize;
const DATATYPES: usize = FI_DATATYPE_COUNT as usize;

/// [`defined`] as one bit per datatype for each (kind, op), so the hot
/// path's check is a load and a shift.
const VALID: [[u16; OPS]; 3] = {
    let kinds = [AtomicKind::Basic, AtomicKind::Fetch, AtomicKind::Compare];
    let mut table = [[0u16; OPS]; 3];
    let mut k = 0;
    while k < 3 {
        let mut op = 0;
        while op < OPS {
            let mut dt = 0;
            while dt < DATATYPES {
                if defined(kinds[k], op as u32, dt as u32) {
                    table[k][op] |= 1 << dt;
                }
                dt += 1;
            }
            op += 1;
        }
        k += 1;
    }
    table
};

/// Element sizes, indexed by datatype.
const SIZES: [usize; DATATYPES] = {
    let mut sizes = [0; DATATYPES];
    sizes[FI_INT8 as usize] = 1;
    sizes[FI_UINT8 as usize] = 1;
    sizes[FI_INT16 as usize] = 2;
    sizes[FI_UINT16 as usize] = 2;
    sizes[FI_INT32 as usize] = 4;
    sizes[FI_UINT32 as usize] = 4;
    sizes[FI_INT64 as usize] = 8;
    sizes[FI_UINT64 as usize] = 8;
    sizes[FI_FLOAT as usize] = 4;
    sizes[FI_DOUBLE as usize] = 8;
    sizes[FI_FLOAT_COMPLEX as usize] = 8;
    sizes[FI_DOUBLE_COMPLEX as usize] = 16;
    sizes[FI_LONG_DOUBLE as usize] = 16;
    sizes[FI_LONG_DOUBLE_COMPLEX as usize] = 32;
    sizes[FI_INT128 as usize] = 16;
    sizes[FI_UINT128 as usize] = 16;
    sizes
};

/// Bytes per element of a datatype; None for unknown datatypes.
pub fn datatype_size(dt: u32) -> Option<usize> {
    SIZES.get(dt as usize).copied()
}

/// True for the datatypes this engine knows (every point-to-point datatype).
pub fn is_supported_datatype(dt: u32) -> bool {
    family(dt).is_some()
}

/// True when (kind, op, datatype) is defined and implemented.
#[inline]
pub fn valid(kind: AtomicKind, op: u32, dt: u32) -> bool {
    let ops = &VALID[kind as usize];
    match ops.get(op as usize) {
        Some(mask) => dt < FI_DATATYPE_COUNT && mask & (1 << dt) != 0,
        None => false,
    }
}

/// The `FI_EOPNOTSUPP` error naming the call, operation and datatype.
#[cold]
#[inline(never)]
fn unsupported(kind: AtomicKind, op: u32, dt: u32) -> Error {
    let op_name = enum_name(ATOMIC_OP_NAMES, op)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("operation {op}"));
    let dt_name = enum_name(DATATYPE_NAMES, dt)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("datatype {dt}"));
    let call = match kind {
        AtomicKind::Basic => "fi_atomic",
        AtomicKind::Fetch => "fi_fetch_atomic",
        AtomicKind::Compare => "fi_compare_atomic",
    };
    Error::new(
        errno::FI_EOPNOTSUPP,
        format!("{call} does not support {op_name} on {dt_name}"),
    )
}

/// The element size of a valid combination, or the `FI_EOPNOTSUPP` error.
#[inline]
fn checked_size(kind: AtomicKind, op: u32, dt: u32) -> Result<usize> {
    if valid(kind, op, dt) {
        Ok(SIZES[dt as usize])
    } else {
        Err(unsupported(kind, op, dt))
    }
}

/// fi_query_atomic's answer: Ok(max element count per operation = max_bytes / size) or Err(FI_EOPNOTSUPP naming op and datatype).
pub fn query(kind: AtomicKind, op: u32, dt: u32, max_bytes: usize) -> Result<usize> {
    checked_size(kind, op, dt).map(|size| max_bytes / size)
}

/// Applies op elementwise. target.len() is a multiple of the element size (count = target.len()/size).
/// operand: same length (ignored/empty allowed for FI_ATOMIC_READ). compare: same length for Compare kind, else empty.
/// result: same length for Fetch and Compare kinds (receives the target's ORIGINAL values), else empty.
/// Errors (FI_EINVAL / FI_EOPNOTSUPP) leave target and result untouched (validate everything before writing).
pub fn apply(
    kind: AtomicKind,
    op: u32,
    dt: u32,
    target: &mut [u8],
    operand: &[u8],
    compare: &[u8],
    result: &mut [u8],
) -> Result<()> {
    let size = checked_size(kind, op, dt)?;
    check_lengths(
        kind,
        op,
        size,
        target.len(),
        operand.len(),
        compare.len(),
        result.len(),
    )?;
    let bufs = Bufs {
        target,
        operand,
        compare,
        result,
    };
    let done = match dt {
        FI_INT8 => with_bits::<i8>(op, bufs),
        FI_UINT8 => with_bits::<u8>(op, bufs),
        FI_INT16 => with_bits::<i16>(op, bufs),
        FI_UINT16 => with_bits::<u16>(op, bufs),
        FI_INT32 => with_bits::<i32>(op, bufs),
        FI_UINT32 => with_bits::<u32>(op, bufs),
        FI_INT64 => with_bits::<i64>(op, bufs),
        FI_UINT64 => with_bits::<u64>(op, bufs),
        FI_INT128 => with_bits::<i128>(op, bufs),
        FI_UINT128 => with_bits::<u128>(op, bufs),
        FI_FLOAT => with_order::<f32>(op, bufs),
        FI_DOUBLE => with_order::<f64>(op, bufs),
        FI_LONG_DOUBLE => with_order::<F80>(op, bufs),
        FI_FLOAT_COMPLEX => with_any::<Complex<f32>>(op, bufs),
        FI_DOUBLE_COMPLEX => with_any::<Complex<f64>>(op, bufs),
        FI_LONG_DOUBLE_COMPLEX => with_any::<Complex<F80>>(op, bufs),
        _ => false,
    };
    if done {
        Ok(())
    } else {
        // Unreachable after `checked_size`; nothing has been written.
        Err(unsupported(kind, op, dt))
    }
}

/// Checks the buffer lengths for an element size (always a power of two).
#[inline]
fn check_lengths(
    kind: AtomicKind,
    op: u32,
    size: usize,
    target: usize,
    operand: usize,
    compare: usize,
    result: usize,
) -> Result<()> {
    debug_assert!(size.is_power_of_two());
    let want_compare = if kind == AtomicKind::Compare {
        target
    } else {
        0
    };
    let want_result = if kind == AtomicKind::Basic { 0 } else { target };
    let operand_ok = operand == target || (op == FI_ATOMIC_READ && operand == 0);
    if target & (size - 1) == 0 && operand_ok && compare == want_compare && result == want_result {
        Ok(())
    } else {
        Err(length_error(
            size,
            target,
            (operand, operand_ok),
            (compare, want_compare),
            (result, want_result),
        ))
    }
}

/// The `FI_EINVAL` error naming the first wrong length.
#[cold]
#[inline(never)]
fn length_error(
    size: usize,
    target: usize,
    (operand, operand_ok): (usize, bool),
    (compare, want_compare): (usize, usize),
    (result, want_result): (usize, usize),
) -> Error {
    Error::inval(if !target.is_multiple_of(size) {
        format!("atomic target of {target} bytes is not a whole number of {size}-byte elements")
    } else if !operand_ok {
        format!("atomic operand of {operand} bytes for a target of {target} bytes")
    } else if compare != want_compare {
        format!("atomic compare buffer of {compare} bytes, expected {want_compare}")
    } else {
        format!("atomic result buffer of {result} bytes, expected {want_result}")
    })
}

/// The buffers of one call, lengths already checked.
struct Bufs<'a> {
    target: &'a mut [u8],
    operand: &'a [u8],
    compare: &'a [u8],
    result: &'a mut [u8],
}

/// One element type as the engine sees it.
trait Elem: Copy {
    /// Bytes per element.
    const SIZE: usize;
    /// Reads an element from exactly `SIZE` bytes.
    fn load(b: &[u8]) -> Self;
    /// Writes the element's value bytes into exactly `SIZE` bytes.
    fn store(self, b: &mut [u8]);
    /// `a + b` as C computes it.
    fn sum(self, o: Self) -> Self;
    /// `a * b` as C computes it.
    fn prod(self, o: Self) -> Self;
    /// `a != 0` (NaN is true).
    fn truth(self) -> bool;
    /// 1 or 0.
    fn from_truth(t: bool) -> Self;
    /// Numeric `a == b`.
    fn same(self, o: Self) -> bool;
}

/// Element types with C's `<` and `<=`.
trait Ordered: Elem {
    fn less(self, o: Self) -> bool;
    fn less_eq(self, o: Self) -> bool;
}

/// Integer element types.
trait Bits: Ordered {
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    fn not(self) -> Self;
}

/// Runs `f(target, operand)` over every element.
#[inline(always)]
fn each<T: Elem>(b: Bufs<'_>, f: impl Fn(T, T) -> T) {
    let s = T::SIZE;
    let fetch = !b.result.is_empty();
    for at in (0..b.target.len()).step_by(s) {
        let t = &mut b.target[at..at + s];
        if fetch {
            b.result[at..at + s].copy_from_slice(t);
        }
        f(T::load(t), T::load(&b.operand[at..at + s])).store(t);
    }
}

/// Runs a compare-form `f(target, operand, compare)` over every element.
#[inline(always)]
fn each_cmp<T: Elem>(b: Bufs<'_>, f: impl Fn(T, T, T) -> T) {
    let s = T::SIZE;
    for at in (0..b.target.len()).step_by(s) {
        let t = &mut b.target[at..at + s];
        b.result[at..at + s].copy_from_slice(t);
        let (o, c) = (&b.operand[at..at + s], &b.compare[at..at + s]);
        f(T::load(t), T::load(o), T::load(c)).store(t);
    }
}

/// The operations every datatype has; false for any other op.
#[inline(always)]
fn with_any<T: Elem>(op: u32, b: Bufs<'_>) -> bool {
    match op {
        FI_SUM => each(b, T::sum),
        FI_PROD => each(b, T::prod),
        FI_LOR => each(b, |t: T, o: T| T::from_truth(t.truth() || o.truth())),
        FI_LAND => each(b, |t: T, o: T| T::from_truth(t.truth() && o.truth())),
        FI_LXOR => each(b, |t: T, o: T| T::from_truth(t.truth() != o.truth())),
        FI_ATOMIC_WRITE => each(b, |_: T, o: T| o),
        FI_ATOMIC_READ => b.result.copy_from_slice(b.target),
        FI_CSWAP => each_cmp(b, |t: T, o, c: T| if c.same(t) { o } else { t }),
        FI_CSWAP_NE => each_cmp(b, |t: T, o, c: T| if c.same(t) { t } else { o }),
        _ => return false,
    }
    true
}

/// Adds the ordering operations.
#[inline(always)]
fn with_order<T: Ordered>(op: u32, b: Bufs<'_>) -> bool {
    match op {
        FI_MIN => each(b, |t: T, o: T| if o.less(t) { o } else { t }),
        FI_MAX => each(b, |t: T, o: T| if t.less(o) { o } else { t }),
        FI_CSWAP_LE => each_cmp(b, |t: T, o, c: T| if c.less_eq(t) { o } else { t }),
        FI_CSWAP_LT => each_cmp(b, |t: T, o, c: T| if c.less(t) { o } else { t }),
        FI_CSWAP_GE => each_cmp(b, |t: T, o, c: T| if t.less_eq(c) { o } else { t }),
        FI_CSWAP_GT => each_cmp(b, |t: T, o, c: T| if t.less(c) { o } else { t }),
        _ => return with_any::<T>(op, b),
    }
    true
}

/// Adds the bitwise operations.
#[inline(always)]
fn with_bits<T: Bits>(op: u32, b: Bufs<'_>) -> bool {
    match op {
        FI_BOR => each(b, T::or),
        FI_BAND => each(b, T::and),
        FI_BXOR => each(b, T::xor),
        FI_MSWAP => each_cmp(b, |t: T, o: T, c: T| o.and(c).or(t.and(c.not()))),
        _ => return with_order::<T>(op, b),
    }
    true
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn load(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_ne_bytes(a)
            }
            #[inline(always)]
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_ne_bytes());
            }
            #[inline(always)]
            fn sum(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn prod(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn truth(self) -> bool {
                self != 0
            }
            #[inline(always)]
            fn from_truth(t: bool) -> Self {
                <$t>::from(t)
            }
            #[inline(always)]
            fn same(self, o: Self) -> bool {
                self == o
            }
        }
        impl Ordered for $t {
            #[inline(always)]
            fn less(self, o: Self) -> bool {
                self < o
            }
            #[inline(always)]
            fn less_eq(self, o: Self) -> bool {
                self <= o
            }
        }
        impl Bits for $t {
            #[inline(always)]
            fn and(self, o: Self) -> Self {
                self & o
            }
            #[inline(always)]
            fn or(self, o: Self) -> Self {
                self | o
            }
            #[inline(always)]
            fn xor(self, o: Self) -> Self {
                self ^ o
            }
            #[inline(always)]
            fn not(self) -> Self {
                !self
            }
        }
    )*};
}

int_elem!(i8, u8, i16, u16, i32, u32, i64, u64, i128, u128);

/// Real element types that can be the parts of a complex number.
trait Part: Ordered {
    /// `a - b` as C computes it.
    fn diff(self, o: Self) -> Self;
    /// Positive zero.
    fn zero() -> Self;
}

macro_rules! float_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn load(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_ne_bytes(a)
            }
            #[inline(always)]
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_ne_bytes());
            }
            #[inline(always)]
            fn sum(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn prod(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn truth(self) -> bool {
                self != 0.0
            }
            #[inline(always)]
            fn from_truth(t: bool) -> Self {
                if t { 1.0 } else { 0.0 }
            }
            #[inline(always)]
            fn same(self, o: Self) -> bool {
                self == o
            }
        }
        impl Ordered for $t {
            #[inline(always)]
            fn less(self, o: Self) -> bool {
                self < o
            }
            #[inline(always)]
            fn less_eq(self, o: Self) -> bool {
                self <= o
            }
        }
        impl Part for $t {
            #[inline(always)]
            fn diff(self, o: Self) -> Self {
                self - o
            }
            #[inline(always)]
            fn zero() -> Self {
                0.0
            }
        }
    )*};
}

float_elem!(f32, f64);

/// A complex number stored as (real, imaginary).
#[derive(Clone, Copy)]
struct Complex<T> {
    re: T,
    im: T,
}

impl<T: Part> Elem for Complex<T> {
    const SIZE: usize = 2 * T::SIZE;
    #[inline(always)]
    fn load(b: &[u8]) -> Self {
        let (re, im) = b.split_at(T::SIZE);
        Complex {
            re: T::load(re),
            im: T::load(im),
        }
    }
    #[inline(always)]
    fn store(self, b: &mut [u8]) {
        let (re, im) = b.split_at_mut(T::SIZE);
        self.re.store(re);
        self.im.store(im);
    }
    fn sum(self, o: Self) -> Self {
        Complex {
            re: self.re.sum(o.re),
            im: self.im.sum(o.im),
        }
    }
    fn prod(self, o: Self) -> Self {
        Complex {
            re: self.re.prod(o.re).diff(self.im.prod(o.im)),
            im: self.re.prod(o.im).sum(self.im.prod(o.re)),
        }
    }
    fn truth(self) -> bool {
        self.re.truth() || self.im.truth()
    }
    fn from_truth(t: bool) -> Self {
        Complex {
            re: T::from_truth(t),
            im: T::zero(),
        }
    }
    fn same(self, o: Self) -> bool {
        self.re.same(o.re) && self.im.same(o.im)
    }
}

/// An x86-64 80-bit extended-precision value: a 64-bit significand with an
/// explicit integer bit, a 15-bit biased exponent and a sign, stored in the
/// first ten bytes of a 16-byte `long double`.
///
/// Arithmetic reproduces the x87 unit at its default (64-bit) precision:
/// round-to-nearest-even, gradual underflow, overflow to infinity. NaN
/// results follow the x87 rules: a signalling NaN is quieted; of two NaNs
/// the one with the larger significand wins (the positive one on a tie);
/// invalid operations (`inf - inf`, `0 * inf`) and encodings the x87 rejects
/// (unnormals, pseudo-infinities, pseudo-NaNs) give the negative "real
/// indefinite" quiet NaN and compare unordered. Pseudo-denormals are read as
/// the denormals they denote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct F80 {
    /// Significand, integer bit at bit 63.
    mant: u64,
    /// Sign (bit 15) and biased exponent.
    sexp: u16,
}

/// What an [`F80`] encoding denotes.
enum Value80 {
    Zero,
    /// `mant / 2^63 * 2^exp`, `mant` normalized (bit 63 set).
    Finite {
        exp: i32,
        mant: u64,
    },
    Inf,
    Nan,
    /// An encoding the x87 refuses as an operand.
    Invalid,
}

const F80_INT_BIT: u64 = 1 << 63;
const F80_QUIET_BIT: u64 = 1 << 62;
const F80_EXP_MASK: u16 = 0x7fff;
const F80_BIAS: i32 = 16383;

impl F80 {
    /// The x87 default NaN ("real indefinite").
    const INDEFINITE: F80 = F80 {
        mant: F80_INT_BIT | F80_QUIET_BIT,
        sexp: 0xffff,
    };
    const ONE: F80 = F80 {
        mant: F80_INT_BIT,
        sexp: 0x3fff,
    };

    fn negative(self) -> bool {
        self.sexp & 0x8000 != 0
    }

    fn signed(neg: bool, exp_field: u16, mant: u64) -> F80 {
        F80 {
            mant,
            sexp: (u16::from(neg) << 15) | exp_field,
        }
    }

    fn zero(neg: bool) -> F80 {
        F80::signed(neg, 0, 0)
    }

    fn infinity(neg: bool) -> F80 {
        F80::signed(neg, F80_EXP_MASK, F80_INT_BIT)
    }

    fn value(self) -> Value80 {
        let e = self.sexp & F80_EXP_MASK;
        let m = self.mant;
        if e == F80_EXP_MASK {
            if m & F80_INT_BIT == 0 {
                Value80::Invalid
            } else if m << 1 == 0 {
                Value80::Inf
            } else {
                Value80::Nan
            }
        } else if e == 0 {
            if m == 0 {
                Value80::Zero
            } else {
                // Denormal or pseudo-denormal: m / 2^63 * 2^(1 - bias).
                let lz = m.leading_zeros();
                Value80::Finite {
                    exp: 1 - F80_BIAS - lz as i32,
                    mant: m << lz,
                }
            }
        } else if m & F80_INT_BIT == 0 {
            Value80::Invalid
        } else {
            Value80::Finite {
                exp: i32::from(e) - F80_BIAS,
                mant: m,
            }
        }
    }

    fn is_nan(self) -> bool {
        matches!(self.value(), Value80::Nan)
    }

    /// The NaN result of an operation with at least one NaN operand and no
    /// invalid encoding.
    fn pick_nan(a: F80, b: F80) -> F80 {
        let w = match (a.is_nan(), b.is_nan()) {
            (true, false) => a,
            (false, true) => b,
            _ if a.mant > b.mant || (a.mant == b.mant && !a.negative()) => a,
            _ => b,
        };
        F80 {
            mant: w.mant | F80_QUIET_BIT,
            sexp: w.sexp,
        }
    }

    /// Rounds `sig / 2^127 * 2^exp` (bit 127 of `sig` set) to nearest even.
    fn round(neg: bool, exp: i32, sig: u128) -> F80 {
        let biased = exp + F80_BIAS;
        if biased >= i32::from(F80_EXP_MASK) {
            return F80::infinity(neg);
        }
        // Bits of sig below the 64 kept: 64 for normals, more for denormals.
        let drop = if biased >= 1 { 64 } else { 65 - biased as i64 };
        let (kept, half, sticky) = if drop > 128 {
            (0, false, true)
        } else if drop == 128 {
            (0, sig >> 127 != 0, sig << 1 != 0)
        } else {
            let d = drop as u32;
            let kept = (sig >> d) as u64;
            let half = (sig >> (d - 1)) & 1 != 0;
            let sticky = sig & ((1u128 << (d - 1)) - 1) != 0;
            (kept, half, sticky)
        };
        let mut mant = kept;
        let mut field = biased.max(0);
        if half && (sticky || mant & 1 != 0) {
            mant = mant.wrapping_add(1);
            if mant == 0 {
                // Carried out of a normal significand.
                mant = F80_INT_BIT;
                field += 1;
                if field >= i32::from(F80_EXP_MASK) {
                    return F80::infinity(neg);
                }
            }
        }
        if field == 0 && mant & F80_INT_BIT != 0 {
            // A denormal that rounded up to the smallest normal.
            field = 1;
        }
        F80::signed(neg, field as u16, mant)
    }

    /// `a + b`, or `a - b` when `sub` (the NaN choice sees b's own sign).
    fn add_sub(a: F80, b: F80, sub: bool) -> F80 {
        let (va, vb) = (a.value(), b.value());
        if matches!(va, Value80::Invalid) || matches!(vb, Value80::Invalid) {
            return F80::INDEFINITE;
        }
        if matches!(va, Value80::Nan) || matches!(vb, Value80::Nan) {
            return F80::pick_nan(a, b);
        }
        let sa = a.negative();
        let sb = b.negative() != sub;
        match (va, vb) {
            (Value80::Inf, Value80::Inf) if sa != sb => F80::INDEFINITE,
            (Value80::Inf, _) => F80::infinity(sa),
            (_, Value80::Inf) => F80::infinity(sb),
            (Value80::Zero, Value80::Zero) => F80::zero(sa && sb),
            (Value80::Zero, Value80::Finite { exp, mant }) => {
                F80::round(sb, exp, u128::from(mant) << 64)
            }
            (Value80::Finite { exp, mant }, Value80::Zero) => {
                F80::round(sa, exp, u128::from(mant) << 64)
            }
            (Value80::Finite { exp: ea, mant: ma }, Value80::Finite { exp: eb, mant: mb }) => {
                // Larger magnitude first; the smaller is shifted right with
                // the lost bits folded into a sticky bit.
                let ((sa, ea, ma), (sb, eb, mb)) = if (ea, ma) >= (eb, mb) {
                    ((sa, ea, ma), (sb, eb, mb))
                } else {
                    ((sb, eb, mb), (sa, ea, ma))
                };
                let big = u128::from(ma) << 63;
                let small = shift_right_jam(u128::from(mb) << 63, (ea - eb) as u32);
                let sig = if sa == sb { big + small } else { big - small };
                if sig == 0 {
                    return F80::zero(false);
                }
                let lz = sig.leading_zeros();
                F80::round(sa, ea + 1 - lz as i32, sig << lz)
            }
            _ => F80::INDEFINITE,
        }
    }

    fn mul(a: F80, b: F80) -> F80 {
        let (va, vb) = (a.value(), b.value());
        if matches!(va, Value80::Invalid) || matches!(vb, Value80::Invalid) {
            return F80::INDEFINITE;
        }
        if matches!(va, Value80::Nan) || matches!(vb, Value80::Nan) {
            return F80::pick_nan(a, b);
        }
        let neg = a.negative() != b.negative();
        match (va, vb) {
            (Value80::Inf, Value80::Zero) | (Value80::Zero, Value80::Inf) => F80::INDEFINITE,
            (Value80::Inf, _) | (_, Value80::Inf) => F80::infinity(neg),
            (Value80::Zero, _) | (_, Value80::Zero) => F80::zero(neg),
            (Value80::Finite { exp: ea, mant: ma }, Value80::Finite { exp: eb, mant: mb }) => {
                let p = u128::from(ma) * u128::from(mb);
                let lz = p.leading_zeros();
                F80::round(neg, ea + eb + 1 - lz as i32, p << lz)
            }
            _ => F80::INDEFINITE,
        }
    }

    /// Numeric comparison; None when either side is NaN or invalid.
    fn compare(a: F80, b: F80) -> Option<Ordering> {
        fn key(x: F80) -> Option<(u8, i32, u64)> {
            match x.value() {
                Value80::Zero => Some((0, 0, 0)),
                Value80::Finite { exp, mant } => Some((1, exp, mant)),
                Value80::Inf => Some((2, 0, 0)),
                Value80::Nan | Value80::Invalid => None,
            }
        }
        let (ka, kb) = (key(a)?, key(b)?);
        if ka.0 == 0 && kb.0 == 0 {
            return Some(Ordering::Equal);
        }
        Some(match (a.negative(), b.negative()) {
            (false, false) => ka.cmp(&kb),
            (true, true) => kb.cmp(&ka),
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
        })
    }
}

/// `x >> n`, with any bits shifted out ORed into bit 0.
fn shift_right_jam(x: u128, n: u32) -> u128 {
    if n == 0 {
        x
    } else if n >= 128 {
        u128::from(x != 0)
    } else {
        (x >> n) | u128::from(x << (128 - n) != 0)
    }
}

impl Elem for F80 {
    const SIZE: usize = 16;
    fn load(b: &[u8]) -> Self {
        let mut m = [0u8; 8];
        m.copy_from_slice(&b[..8]);
        F80 {
            mant: u64::from_le_bytes(m),
            sexp: u16::from_le_bytes([b[8], b[9]]),
        }
    }
    /// Writes the ten value bytes; the padding is left alone.
    fn store(self, b: &mut [u8]) {
        b[..8].copy_from_slice(&self.mant.to_le_bytes());
        b[8..10].copy_from_slice(&self.sexp.to_le_bytes());
    }
    fn sum(self, o: Self) -> Self {
        F80::add_sub(self, o, false)
    }
    fn prod(self, o: Self) -> Self {
        F80::mul(self, o)
    }
    fn truth(self) -> bool {
        F80::compare(self, F80::zero(false)) != Some(Ordering::Equal)
    }
    fn from_truth(t: bool) -> Self {
        if t {
            F80::ONE
        } else {
            F80::zero(false)
        }
    }
    fn same(self, o: Self) -> bool {
        F80::compare(self, o) == Some(Ordering::Equal)
    }
}

impl Ordered for F80 {
    fn less(self, o: Self) -> bool {
        F80::compare(self, o) == Some(Ordering::Less)
    }
    fn less_eq(self, o: Self) -> bool {
        matches!(
            F80::compare(self, o),
            Some(Ordering::Less | Ordering::Equal)
        )
    }
}

impl Part for F80 {
    fn diff(self, o: Self) -> Self {
        F80::add_sub(self, o, true)
    }
    fn zero() -> Self {
        F80::zero(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(sexp: u16, mant: u64) -> F80 {
        F80 { mant, sexp }
    }

    #[test]
    fn f80_basic_arithmetic() {
        let two = f(0x4000, F80_INT_BIT);
        assert_eq!(F80::add_sub(F80::ONE, F80::ONE, false), two);
        assert_eq!(F80::mul(two, two), f(0x4001, F80_INT_BIT));
        assert_eq!(F80::add_sub(F80::ONE, F80::ONE, true), F80::zero(false));
        // 1 + 2^-64 is a tie between 1 and 1 + 2^-63: even wins.
        let half_ulp = f(0x3fff - 64, F80_INT_BIT);
        assert_eq!(F80::add_sub(F80::ONE, half_ulp, false), F80::ONE);
    }

    #[test]
    fn f80_specials() {
        let inf = F80::infinity(false);
        assert_eq!(F80::add_sub(inf, inf, true), F80::INDEFINITE);
        assert_eq!(F80::mul(inf, F80::zero(true)), F80::INDEFINITE);
        let unnormal = f(0x3fff, 1);
        assert_eq!(F80::add_sub(unnormal, F80::ONE, false), F80::INDEFINITE);
        assert!(F80::compare(unnormal, unnormal).is_none());
        // A pseudo-denormal reads as the smallest normal.
        let pseudo = f(0, F80_INT_BIT);
        assert_eq!(
            F80::compare(pseudo, f(1, F80_INT_BIT)),
            Some(Ordering::Equal)
        );
    }

    #[test]
    fn matrix_counts() {
        let count = |kind| {
            (0..32)
                .flat_map(|op| (0..32).map(move |dt| (op, dt)))
                .filter(|&(op, dt)| valid(kind, op, dt))
                .count()
        };
        assert_eq!(count(AtomicKind::Basic), 152);
        assert_eq!(count(AtomicKind::Fetch), 168);
        assert_eq!(count(AtomicKind::Compare), 94);
    }
}
