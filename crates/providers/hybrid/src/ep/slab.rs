//! Records of operations in flight by stable index: an index is reused only
//! once its record was taken.

/// A slab: stable indices, reused.
pub(super) struct Slab<T> {
    v: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Slab<T> {
    pub(super) fn new() -> Self {
        Slab {
            v: Vec::new(),
            free: Vec::new(),
        }
    }
    pub(super) fn insert(&mut self, t: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.v[i] = Some(t);
                i
            }
            None => {
                self.v.push(Some(t));
                self.v.len() - 1
            }
        }
    }
    pub(super) fn take(&mut self, i: usize) -> Option<T> {
        let t = self.v.get_mut(i)?.take();
        if t.is_some() {
            self.free.push(i);
        }
        t
    }
    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.v.get_mut(i)?.as_mut()
    }
}
