package mr

// The address index answers FindByAddr: for each protection domain, a
// treap (a binary search tree kept balanced by random heap priorities) of
// its regions ordered by start address (then key, so the order is total),
// each node carrying the largest end address in its subtree. Regions may
// overlap. A range [va, want) lies inside some region if and only if, among
// the regions that start at or below va, the one that ends last ends at or
// above want; the subtree maxima find that one in one walk from the root.
// Insert, remove and find cost O(log n) expected for n regions in the PD.
//
// The tree links live in MR (idx), so indexing a region allocates nothing.
// All of it is protected by Table.mu: written under the write lock, read
// under the read lock.

import "math/rand/v2"

// treeNode is a region's place in its PD's address tree.
type treeNode struct {
	left, right *MR
	prio        uint32 // heap order: a parent's prio >= its children's
	maxEnd      uint64 // the largest end() in the subtree rooted here
}

// end returns the address just past the region.
func (m *MR) end() uint64 { return m.addr + uint64(len(m.buf)) }

// before reports whether a sorts before b in the address tree.
func before(a, b *MR) bool {
	return a.addr < b.addr || a.addr == b.addr && a.key < b.key
}

// fix recomputes m's subtree maximum from its children.
func (m *MR) fix() {
	e := m.end()
	if l := m.idx.left; l != nil && l.idx.maxEnd > e {
		e = l.idx.maxEnd
	}
	if r := m.idx.right; r != nil && r.idx.maxEnd > e {
		e = r.idx.maxEnd
	}
	m.idx.maxEnd = e
}

// treeInsert inserts m, which is not in the tree, into the tree rooted at
// t and returns the new root.
func treeInsert(t, m *MR) *MR {
	m.idx = treeNode{prio: rand.Uint32()}
	return insertNode(t, m)
}

func insertNode(t, m *MR) *MR {
	if t == nil {
		m.fix()
		return m
	}
	if m.idx.prio > t.idx.prio {
		m.idx.left, m.idx.right = split(t, m)
		m.fix()
		return m
	}
	if before(m, t) {
		t.idx.left = insertNode(t.idx.left, m)
	} else {
		t.idx.right = insertNode(t.idx.right, m)
	}
	t.fix()
	return t
}

// split splits the tree rooted at t into the regions before m and those
// after it (m is not in the tree).
func split(t, m *MR) (lo, hi *MR) {
	if t == nil {
		return nil, nil
	}
	if before(t, m) {
		t.idx.right, hi = split(t.idx.right, m)
		t.fix()
		return t, hi
	}
	lo, t.idx.left = split(t.idx.left, m)
	t.fix()
	return lo, t
}

// treeRemove removes m, which is in the tree rooted at t, and returns the
// new root.
func treeRemove(t, m *MR) *MR {
	if t == m {
		r := merge(m.idx.left, m.idx.right)
		m.idx = treeNode{}
		return r
	}
	if before(m, t) {
		t.idx.left = treeRemove(t.idx.left, m)
	} else {
		t.idx.right = treeRemove(t.idx.right, m)
	}
	t.fix()
	return t
}

// merge joins two trees, every region of lo sorting before every region
// of hi.
func merge(lo, hi *MR) *MR {
	switch {
	case lo == nil:
		return hi
	case hi == nil:
		return lo
	case lo.idx.prio >= hi.idx.prio:
		lo.idx.right = merge(lo.idx.right, hi)
		lo.fix()
		return lo
	default:
		hi.idx.left = merge(lo, hi.idx.left)
		hi.fix()
		return hi
	}
}

// treeFind returns a region of the tree rooted at t with addr <= va and
// end() >= want, or nil.
func treeFind(t *MR, va, want uint64) *MR {
	for t != nil {
		if t.addr > va {
			t = t.idx.left // t and its right subtree start too late
			continue
		}
		// t and its whole left subtree start at or below va.
		if t.end() >= want {
			return t
		}
		if l := t.idx.left; l != nil && l.idx.maxEnd >= want {
			return descend(l, want)
		}
		t = t.idx.right
	}
	return nil
}

// descend returns a region of the tree rooted at t with end() >= want,
// which t.idx.maxEnd promises.
func descend(t *MR, want uint64) *MR {
	for t.end() < want {
		if l := t.idx.left; l != nil && l.idx.maxEnd >= want {
			t = l
		} else {
			t = t.idx.right
		}
	}
	return t
}
