//! One-sided requests as the target checks them before any byte moves:
//! an ATOMIC's operation, datatype, element count and inline operands
//! ([`AtomicReq`]). Everything here comes from a peer's ring entry, so
//! every field is checked and every failure is the FI_E* number the
//! target answers with.

use ofi_base::atomic::{self, AtomicKind};
use ofi_base::consts::{atomic_op, FI_REMOTE_READ, FI_REMOTE_WRITE};
use ofi_base::error::errno;
use ofi_wire::shm::{Ranges, Repr};

/// An ATOMIC request, decoded and checked against its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicReq<'a> {
    /// Basic, fetch or compare.
    pub kind: AtomicKind,
    /// The FI_ATOMIC_* operation.
    pub op: u32,
    /// The FI_* datatype.
    pub datatype: u32,
    /// Bytes per element.
    pub size: usize,
    /// Elements (the remote ranges hold exactly this many).
    pub count: usize,
    /// Bytes of the operation (`count * size`): of the operands, and of
    /// the results a fetch or compare sends back.
    pub bytes: usize,
    /// The operands, when the request carries them.
    pub operand: Option<&'a [u8]>,
    /// The compare values (compare kind).
    pub compare: Option<&'a [u8]>,
}

impl<'a> AtomicReq<'a> {
    /// The `tag` of an ATOMIC entry: `op | datatype << 8 | kind << 16`. An
    /// operation or datatype past a byte is sent as 0xff, which names none
    /// (the target refuses it) rather than cut to another one.
    pub fn tag(kind: AtomicKind, op: u32, datatype: u32) -> u64 {
        let k: u64 = match kind {
            AtomicKind::Basic => 0,
            AtomicKind::Fetch => 1,
            AtomicKind::Compare => 2,
        };
        let byte = |v: u32| u64::from(u8::try_from(v).unwrap_or(0xff));
        byte(op) | byte(datatype) << 8 | k << 16
    }

    /// Decodes and checks the ATOMIC request `r` (its ranges `rg`, its
    /// entry's `payload`): a known kind, a valid (kind, op, datatype), at
    /// most `max_bytes` of data, remote ranges holding exactly the element
    /// count, and inline data of exactly the operands and compare values
    /// the kind takes (only a fetching FI_ATOMIC_READ goes without
    /// operands). `Err`: the FI_E* number to answer with.
    pub fn decode(
        r: &Repr,
        rg: &Ranges,
        payload: &'a [u8],
        max_bytes: usize,
    ) -> Result<AtomicReq<'a>, i32> {
        let op = (r.tag & 0xff) as u32;
        let datatype = ((r.tag >> 8) & 0xff) as u32;
        let kind = match r.tag >> 16 {
            0 => AtomicKind::Basic,
            1 => AtomicKind::Fetch,
            2 => AtomicKind::Compare,
            _ => return Err(errno::FI_EINVAL),
        };
        let size = atomic::datatype_size(datatype)
            .filter(|_| atomic::valid(kind, op, datatype))
            .ok_or(errno::FI_EOPNOTSUPP)?;
        let count = usize::try_from(r.total).map_err(|_| errno::FI_EMSGSIZE)?;
        let bytes = count
            .checked_mul(size)
            .filter(|b| *b <= max_bytes)
            .ok_or(errno::FI_EMSGSIZE)?;
        if rg.remote_len() != r.total {
            return Err(errno::FI_EINVAL);
        }
        let read_only = kind == AtomicKind::Fetch && op == atomic_op::FI_ATOMIC_READ;
        let with_compare = kind == AtomicKind::Compare;
        let len = r.len as usize;
        let with_operand = len != if with_compare { bytes } else { 0 };
        let expect = bytes * (usize::from(with_operand) + usize::from(with_compare));
        if len != expect || (!with_operand && !read_only) {
            return Err(errno::FI_EINVAL);
        }
        let data = rg
            .data_at
            .checked_add(len)
            .and_then(|end| payload.get(rg.data_at..end))
            .ok_or(errno::FI_EINVAL)?;
        let (operand, compare) = match (with_operand, with_compare) {
            (true, true) => {
                let (o, c) = data.split_at(bytes);
                (Some(o), Some(c))
            }
            (true, false) => (Some(data), None),
            (false, true) => (None, Some(data)),
            (false, false) => (None, None),
        };
        Ok(AtomicReq {
            kind,
            op,
            datatype,
            size,
            count,
            bytes,
            operand,
            compare,
        })
    }

    /// A fetching FI_ATOMIC_READ: only reads the target.
    pub fn read_only(&self) -> bool {
        self.kind == AtomicKind::Fetch && self.op == atomic_op::FI_ATOMIC_READ
    }

    /// The access the target's regions must grant.
    pub fn access(&self) -> u64 {
        if self.read_only() {
            FI_REMOTE_READ
        } else {
            FI_REMOTE_WRITE
        }
    }

    /// Bytes the answer carries back (the fetched or compared values).
    pub fn answer_len(&self) -> usize {
        if self.kind == AtomicKind::Basic {
            0
        } else {
            self.bytes
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ofi_base::consts::datatype::{FI_INT32, FI_UINT64};
    use ofi_wire::shm::{op, WireRange};

    fn req(kind: AtomicKind, aop: u32, dt: u32, count: u64, len: u32) -> (Repr, Ranges) {
        let r = Repr {
            op: op::ATOMIC,
            iov_cnt: 1,
            len,
            tag: AtomicReq::tag(kind, aop, dt),
            total: count,
            ..Default::default()
        };
        let mut rg = Ranges {
            n_remote: 1,
            data_at: 24,
            ..Default::default()
        };
        rg.remote[0] = WireRange {
            addr: 0,
            len: count,
            key: 1,
        };
        (r, rg)
    }

    #[test]
    fn operands_and_compare_values_are_cut_from_the_entry() {
        let payload: Vec<u8> = (0..24 + 32).map(|i| i as u8).collect();
        let (r, rg) = req(AtomicKind::Compare, atomic_op::FI_CSWAP, FI_UINT64, 2, 32);
        let q = AtomicReq::decode(&r, &rg, &payload, 1024).expect("a compare-swap");
        assert_eq!((q.size, q.count, q.bytes), (8, 2, 16));
        assert_eq!(q.operand, Some(&payload[24..40]));
        assert_eq!(q.compare, Some(&payload[40..56]));
        assert_eq!((q.access(), q.answer_len()), (FI_REMOTE_WRITE, 16));
        let (r, rg) = req(AtomicKind::Fetch, atomic_op::FI_ATOMIC_READ, FI_INT32, 3, 0);
        let q = AtomicReq::decode(&r, &rg, &payload, 1024).expect("a read");
        assert_eq!((q.operand, q.compare), (None, None));
        assert!(q.read_only());
        assert_eq!(q.access(), FI_REMOTE_READ);
        let (r, rg) = req(AtomicKind::Basic, atomic_op::FI_SUM, FI_INT32, 2, 8);
        let q = AtomicReq::decode(&r, &rg, &payload, 1024).expect("a sum");
        assert_eq!((q.operand.map(<[u8]>::len), q.answer_len()), (Some(8), 0));
    }

    #[test]
    fn impossible_requests_get_their_error_number() {
        let payload = [0u8; 2048];
        let dec = |(r, rg): (Repr, Ranges)| AtomicReq::decode(&r, &rg, &payload, 1024).err();
        let sum = |count, len| req(AtomicKind::Basic, atomic_op::FI_SUM, FI_INT32, count, len);
        // An operation past a byte is not cut to another one.
        assert_eq!(
            dec(req(
                AtomicKind::Basic,
                256 + atomic_op::FI_SUM,
                FI_INT32,
                1,
                4
            )),
            Some(errno::FI_EOPNOTSUPP)
        );
        // Unknown kind, and bits above it.
        let (mut r, rg) = sum(1, 4);
        r.tag |= 3 << 16;
        assert_eq!(dec((r, rg)), Some(errno::FI_EINVAL));
        r.tag = AtomicReq::tag(AtomicKind::Basic, atomic_op::FI_SUM, FI_INT32) | 1 << 40;
        assert_eq!(dec((r, rg)), Some(errno::FI_EINVAL));
        // An operation the datatype does not take, an unknown datatype.
        assert_eq!(
            dec(req(AtomicKind::Basic, atomic_op::FI_CSWAP, FI_INT32, 1, 4)),
            Some(errno::FI_EOPNOTSUPP)
        );
        assert_eq!(
            dec(req(AtomicKind::Basic, atomic_op::FI_SUM, 200, 1, 4)),
            Some(errno::FI_EOPNOTSUPP)
        );
        // Too many elements, even overflowing.
        assert_eq!(dec(sum(257, 4)), Some(errno::FI_EMSGSIZE));
        assert_eq!(dec(sum(u64::MAX, 4)), Some(errno::FI_EMSGSIZE));
        // Operand lengths that fit no reading of the kind.
        assert_eq!(dec(sum(2, 4)), Some(errno::FI_EINVAL));
        assert_eq!(
            dec(sum(2, 0)),
            Some(errno::FI_EINVAL),
            "a sum without operands"
        );
        assert_eq!(
            dec(req(
                AtomicKind::Compare,
                atomic_op::FI_CSWAP,
                FI_INT32,
                2,
                12
            )),
            Some(errno::FI_EINVAL)
        );
        // Ranges holding another count than the request's.
        let (r, mut rg) = sum(2, 8);
        rg.remote[0].len = 3;
        assert_eq!(dec((r, rg)), Some(errno::FI_EINVAL));
        // Operands past the entry.
        let (r, mut rg) = sum(2, 8);
        rg.data_at = 2044;
        assert_eq!(dec((r, rg)), Some(errno::FI_EINVAL));
    }
}
