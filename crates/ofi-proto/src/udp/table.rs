//! Tables keyed by peer id. The session table hands out the ids: a slot
//! index and that slot's generation, so a lookup is an index and a
//! compare (no hashing, no tree walk), and the id of a forgotten peer,
//! whose slot a newcomer took, names nothing.

use super::session::PeerId;

/// The slot of `id`.
#[inline]
fn slot(id: PeerId) -> usize {
    (id & 0xffff_ffff) as usize
}

/// The session table's peers: each under the id [`Slab::insert`] gave it.
/// Iteration goes by slot (the order peers came in, until a forgotten
/// peer's slot is taken again).
#[derive(Debug)]
pub(super) struct Slab<T> {
    slots: Vec<(PeerId, Option<T>)>,
    free: Vec<usize>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Holds `v` under a new id.
    pub(super) fn insert(&mut self, v: T) -> PeerId {
        self.len += 1;
        if let Some(i) = self.free.pop() {
            let gen = (self.slots[i].0 >> 32) as u32;
            let gen = gen.checked_add(1).unwrap_or(1);
            let id = (u64::from(gen) << 32) | i as u64;
            self.slots[i] = (id, Some(v));
            return id;
        }
        let i = self.slots.len();
        let id = (1u64 << 32) | i as u64;
        self.slots.push((id, Some(v)));
        id
    }

    /// The entry of `id`.
    #[inline]
    pub(super) fn get(&self, id: PeerId) -> Option<&T> {
        match self.slots.get(slot(id)) {
            Some((k, v)) if *k == id => v.as_ref(),
            _ => None,
        }
    }

    /// The entry of `id`, to change.
    #[inline]
    pub(super) fn get_mut(&mut self, id: PeerId) -> Option<&mut T> {
        match self.slots.get_mut(slot(id)) {
            Some((k, v)) if *k == id => v.as_mut(),
            _ => None,
        }
    }

    /// Forgets `id`; its slot goes to the next newcomer.
    pub(super) fn remove(&mut self, id: PeerId) -> Option<T> {
        let i = slot(id);
        let v = match self.slots.get_mut(i) {
            Some((k, v)) if *k == id => v.take()?,
            _ => return None,
        };
        self.len -= 1;
        self.free.push(i);
        Some(v)
    }

    /// Slots in use and free: the bound of [`id_at`](Self::id_at).
    pub(super) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The id held in slot `i`, if any.
    pub(super) fn id_at(&self, i: usize) -> Option<PeerId> {
        match self.slots.get(i) {
            Some((id, Some(_))) => Some(*id),
            _ => None,
        }
    }

    /// The entries with their ids, by slot.
    pub(super) fn iter(&self) -> impl Iterator<Item = (PeerId, &T)> + '_ {
        self.slots
            .iter()
            .filter_map(|(id, v)| v.as_ref().map(|v| (*id, v)))
    }

    /// The entries, by slot.
    pub(super) fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.slots.iter().filter_map(|(_, v)| v.as_ref())
    }

    /// The entries, by slot, to change.
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.slots.iter_mut().filter_map(|(_, v)| v.as_mut())
    }
}

/// Values kept per peer id of a [`Slab`] elsewhere, by the same slots.
#[derive(Debug)]
pub(super) struct ById<T> {
    slots: Vec<Option<(PeerId, T)>>,
    len: usize,
}

impl<T> Default for ById<T> {
    fn default() -> Self {
        ById {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<T> ById<T> {
    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The value of `id`.
    #[inline]
    pub(super) fn get(&self, id: PeerId) -> Option<&T> {
        match self.slots.get(slot(id)) {
            Some(Some((k, v))) if *k == id => Some(v),
            _ => None,
        }
    }

    /// The value of `id`, to change.
    #[inline]
    pub(super) fn get_mut(&mut self, id: PeerId) -> Option<&mut T> {
        match self.slots.get_mut(slot(id)) {
            Some(Some((k, v))) if *k == id => Some(v),
            _ => None,
        }
    }

    /// The value of `id`, made by `make` when there is none (a value of a
    /// forgotten id in the same slot is dropped).
    #[inline]
    pub(super) fn get_or_insert_with(&mut self, id: PeerId, make: impl FnOnce() -> T) -> &mut T {
        let i = slot(id);
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        let s = &mut self.slots[i];
        if !matches!(s, Some((k, _)) if *k == id) {
            if s.is_none() {
                self.len += 1;
            }
            *s = Some((id, make()));
        }
        match s {
            Some((_, v)) => v,
            None => unreachable!("just filled"),
        }
    }

    /// Forgets the value of `id`.
    pub(super) fn remove(&mut self, id: PeerId) -> Option<T> {
        let s = self.slots.get_mut(slot(id))?;
        if !matches!(s, Some((k, _)) if *k == id) {
            return None;
        }
        self.len -= 1;
        s.take().map(|(_, v)| v)
    }

    /// The values with their ids, by slot, to change.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (PeerId, &mut T)> + '_ {
        self.slots
            .iter_mut()
            .filter_map(|s| s.as_mut().map(|(id, v)| (*id, v)))
    }

    /// The values, by slot, to change.
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.slots
            .iter_mut()
            .filter_map(|s| s.as_mut().map(|(_, v)| v))
    }

    /// Forgets every value.
    pub(super) fn clear(&mut self) {
        self.slots.clear();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_forgotten_entries_name_nothing() {
        let mut s: Slab<&str> = Slab::default();
        let a = s.insert("a");
        let b = s.insert("b");
        assert_eq!(s.get(a), Some(&"a"));
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.get(a), None);
        let c = s.insert("c");
        assert_ne!(c, a, "a slot taken again has a new id");
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(c), Some(&"c"));
        assert_eq!(s.len(), 2);
        assert_eq!(s.iter().map(|(id, _)| id).collect::<Vec<_>>(), vec![c, b]);
        let mut m: ById<u32> = ById::default();
        *m.get_or_insert_with(a, || 1) += 1;
        assert_eq!(m.get(a), Some(&2));
        // The newcomer in a's slot does not see a's value.
        assert_eq!(m.get(c), None);
        assert_eq!(*m.get_or_insert_with(c, || 7), 7);
        assert_eq!(m.get(a), None);
        assert_eq!(m.len(), 1);
    }
}
