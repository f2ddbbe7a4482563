//! Operations waiting for a peer's answer, named by cookies.
//!
//! A cookie is `generation << 32 | slot`. A slot is reused once its
//! operation is taken, under a new generation, so an answer that arrives
//! late (or one a peer forged) names no live operation and is ignored.
//! Each table stamps its own bit into the generation, so the cookies of two
//! tables (sends and one-sided operations) never coincide.

use super::PeerId;

/// Why an answer names no operation: it is dropped, and no operation
/// changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stray {
    /// No live operation has this cookie (a late answer, or a forged one).
    Unknown,
    /// The operation went to peer `to`, not to the answer's sender.
    WrongPeer {
        /// The peer the operation went to.
        to: PeerId,
    },
}

impl std::fmt::Display for Stray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stray::Unknown => write!(f, "answer for no pending operation"),
            Stray::WrongPeer { to } => {
                write!(f, "answer from another peer than the operation's ({to:#x})")
            }
        }
    }
}

/// A table of in-flight operations of type `T`.
#[derive(Debug)]
pub struct OpTable<T> {
    slots: Vec<Option<(u32, T)>>,
    free: Vec<u32>,
    next_gen: u32,
    mark: u32,
    live: usize,
}

impl<T> OpTable<T> {
    /// An empty table; `mark` (0 or 1) tells its cookies from another
    /// table's.
    pub fn new(mark: u32) -> Self {
        OpTable {
            slots: Vec::new(),
            free: Vec::new(),
            next_gen: 1,
            mark: (mark & 1) << 31,
            live: 0,
        }
    }

    /// Adds an operation; returns its cookie.
    #[inline]
    pub fn insert(&mut self, v: T) -> u64 {
        let gen = self.next_gen | self.mark;
        self.next_gen = (self.next_gen + 1) & 0x7fff_ffff;
        if self.next_gen == 0 {
            self.next_gen = 1;
        }
        let idx = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some((gen, v));
                i
            }
            None => {
                self.slots.push(Some((gen, v)));
                (self.slots.len() - 1) as u32
            }
        };
        self.live += 1;
        (u64::from(gen) << 32) | u64::from(idx)
    }

    #[inline]
    fn slot(cookie: u64) -> (usize, u32) {
        (cookie as u32 as usize, (cookie >> 32) as u32)
    }

    /// The live operation `cookie` names.
    #[inline]
    pub fn get(&self, cookie: u64) -> Option<&T> {
        let (i, gen) = Self::slot(cookie);
        match self.slots.get(i)? {
            Some((g, v)) if *g == gen => Some(v),
            _ => None,
        }
    }

    /// The live operation `cookie` names, to update.
    #[inline]
    pub fn get_mut(&mut self, cookie: u64) -> Option<&mut T> {
        let (i, gen) = Self::slot(cookie);
        match self.slots.get_mut(i)? {
            Some((g, v)) if *g == gen => Some(v),
            _ => None,
        }
    }

    /// The live operation `cookie` names, to act on an answer from peer
    /// `from`; `peer` says which peer an operation went to. Cookies are
    /// sequential, so another endpoint can guess one: an answer from any
    /// other peer than the operation's names nothing and leaves it as it
    /// was.
    #[inline]
    pub fn answered(
        &mut self,
        cookie: u64,
        from: PeerId,
        peer: impl FnOnce(&T) -> PeerId,
    ) -> Result<&mut T, Stray> {
        let v = self.get_mut(cookie).ok_or(Stray::Unknown)?;
        match peer(v) {
            to if to == from => Ok(v),
            to => Err(Stray::WrongPeer { to }),
        }
    }

    /// Removes and returns the live operation `cookie` names.
    #[inline]
    pub fn take(&mut self, cookie: u64) -> Option<T> {
        let (i, gen) = Self::slot(cookie);
        let slot = self.slots.get_mut(i)?;
        if !matches!(slot, Some((g, _)) if *g == gen) {
            return None;
        }
        let (_, v) = slot.take()?;
        self.free.push(i as u32);
        self.live -= 1;
        Some(v)
    }

    /// Removes every operation `pred` selects (a dead peer's), appending
    /// them with their cookies to `out`.
    pub fn take_where(&mut self, mut pred: impl FnMut(&T) -> bool, out: &mut Vec<(u64, T)>) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if matches!(slot, Some((_, v)) if pred(v)) {
                if let Some((g, v)) = slot.take() {
                    out.push(((u64::from(g) << 32) | i as u64, v));
                    self.free.push(i as u32);
                    self.live -= 1;
                }
            }
        }
    }

    /// True when some live operation satisfies `pred`.
    pub fn any(&self, mut pred: impl FnMut(&T) -> bool) -> bool {
        self.slots.iter().flatten().any(|(_, v)| pred(v))
    }

    /// Live operations with their cookies.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.as_ref()
                .map(|(g, v)| ((u64::from(*g) << 32) | i as u64, v))
        })
    }

    /// Operations in flight.
    #[inline]
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when nothing is in flight.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Forgets every operation.
    pub fn clear(&mut self) {
        self.slots.clear();
        self.free.clear();
        self.live = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_cookie_is_stale_even_after_its_slot_is_reused() {
        let mut t = OpTable::new(0);
        let a = t.insert("a");
        assert_eq!(t.take(a), Some("a"));
        let b = t.insert("b");
        assert_eq!(a as u32, b as u32, "the slot is reused");
        assert_eq!(t.get(a), None, "the old cookie names nothing");
        assert_eq!(t.take(a), None);
        assert_eq!(t.get(b), Some(&"b"));
    }

    #[test]
    fn an_answer_from_another_peer_names_nothing() {
        let mut t = OpTable::new(1);
        let c = t.insert((7u64, 0u32));
        let to = |v: &(u64, u32)| v.0;
        assert_eq!(
            t.answered(c, 8, to).map(|v| *v),
            Err(Stray::WrongPeer { to: 7 })
        );
        assert_eq!(t.get(c), Some(&(7, 0)), "untouched");
        assert_eq!(t.answered(c ^ 1, 7, to).map(|v| *v), Err(Stray::Unknown));
        t.answered(c, 7, to).expect("its own peer").1 = 1;
        assert_eq!(t.take(c), Some((7, 1)));
    }

    #[test]
    fn tables_with_different_marks_never_share_a_cookie() {
        let mut s = OpTable::new(0);
        let mut r = OpTable::new(1);
        let a = s.insert(1);
        let b = r.insert(2);
        assert_ne!(a, b);
        assert_eq!(s.get(b), None);
        assert_eq!(r.get(a), None);
    }

    #[test]
    fn take_where_removes_exactly_the_selected() {
        let mut t = OpTable::new(0);
        let cookies: Vec<u64> = (0..6).map(|i| t.insert(i)).collect();
        let mut out = Vec::new();
        t.take_where(|v| v % 2 == 0, &mut out);
        let got: Vec<i32> = out.iter().map(|x| x.1).collect();
        assert_eq!(got, vec![0, 2, 4]);
        for (c, v) in &out {
            assert_eq!(cookies[*v as usize], *c, "the cookie comes along");
        }
        assert_eq!(t.len(), 3);
        assert!(t.any(|v| *v == 5));
        assert!(!t.any(|v| *v == 4));
    }
}
