//! Requests larger than a session carries, sans-IO: a READ or WRITE of up
//! to [`MAX_REQUEST`] bytes is cut into pieces of at most the session's
//! largest transfer ([`pieces`]), each forwarded on its own, and the
//! client's request is answered once every piece has ended ([`Gather`]):
//! with the pieces' buffers in order, or with the error of the first
//! piece (in volume order) that failed.

use crate::wire::Status;

/// Largest READ or WRITE the gateway takes from a client (32 MiB: the
/// most NBD lets a client assume without block size constraints, and the
/// largest request of common clients). Larger ones are refused with
/// EOVERFLOW; those above the advertised maximum block size and up to
/// this bound are split.
pub const MAX_REQUEST: u32 = 32 << 20;

/// The pieces of `len` bytes at `offset`, each at most `max` bytes (0
/// counts as 1), in order: `(offset, len)` of each.
pub fn pieces(offset: u64, len: u32, max: u32) -> impl Iterator<Item = (u64, u32)> {
    let max = max.max(1);
    (0..len.div_ceil(max)).map(move |i| {
        let at = i * max;
        (offset + at as u64, (len - at).min(max))
    })
}

/// The outcomes of a request's pieces as they end, in any order.
#[derive(Debug)]
pub struct Gather<T> {
    parts: Vec<Option<Result<T, Status>>>,
    left: usize,
}

impl<T> Gather<T> {
    /// A request of `n` pieces (at least 1).
    pub fn new(n: usize) -> Self {
        let n = n.max(1);
        Gather {
            parts: (0..n).map(|_| None).collect(),
            left: n,
        }
    }

    /// Pieces not ended yet.
    pub fn left(&self) -> usize {
        self.left
    }

    /// Piece `i` ended with `r`; true once every piece has. A piece
    /// unknown or already ended is ignored (false unless all have).
    pub fn done(&mut self, i: usize, r: Result<T, Status>) -> bool {
        if let Some(p @ None) = self.parts.get_mut(i) {
            *p = Some(r);
            self.left -= 1;
        }
        self.left == 0
    }

    /// The outcome once every piece has ended (None before): the pieces'
    /// values in order, or the first failed piece's status with the
    /// values of those that succeeded (their buffers, to reuse).
    pub fn finish(self) -> Option<(Result<(), Status>, Vec<T>)> {
        if self.left > 0 {
            return None;
        }
        let mut status = Ok(());
        let mut values = Vec::with_capacity(self.parts.len());
        for p in self.parts.into_iter().flatten() {
            match p {
                Ok(v) => values.push(v),
                Err(st) => {
                    if status.is_ok() {
                        status = Err(st);
                    }
                }
            }
        }
        Some((status, values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_request_in_order() {
        let p: Vec<_> = pieces(4096, 10 << 20, 4 << 20).collect();
        assert_eq!(
            p,
            [
                (4096, 4 << 20),
                (4096 + (4 << 20), 4 << 20),
                (4096 + (8 << 20), 2 << 20)
            ]
        );
        assert_eq!(pieces(0, 512, 512).collect::<Vec<_>>(), [(0, 512)]);
        assert_eq!(pieces(7, 1000, 0).count(), 1000);
        assert_eq!(pieces(0, 0, 512).count(), 0);
        // The largest request at the smallest transfer a target grants.
        let n = pieces(0, MAX_REQUEST, 512).count();
        assert_eq!(n, 65536);
        let total: u64 = pieces(1, MAX_REQUEST - 3, 1 << 20)
            .map(|(_, l)| l as u64)
            .sum();
        assert_eq!(total, (MAX_REQUEST - 3) as u64);
    }

    #[test]
    fn a_request_ends_with_its_last_piece_in_order_or_with_the_first_error() {
        let mut g = Gather::new(3);
        assert!(!g.done(2, Ok("c")));
        assert!(!g.done(0, Ok("a")));
        assert!(!g.done(2, Ok("again")), "a piece ends once");
        assert!(!g.done(9, Ok("stray")));
        assert_eq!(g.left(), 1);
        assert!(g.done(1, Ok("b")));
        assert_eq!(g.finish(), Some((Ok(()), vec!["a", "b", "c"])));

        let mut g = Gather::new(4);
        g.done(3, Err(Status::NoSpace));
        g.done(0, Ok(0));
        g.done(1, Err(Status::Io));
        let early = Gather::<u8>::new(2);
        assert_eq!(early.finish(), None, "not before every piece");
        assert!(g.done(2, Ok(2)));
        assert_eq!(g.finish(), Some((Err(Status::Io), vec![0, 2])));
    }
}
