//! Weights and named resources: what a job needs beyond a free key, whether it fits in what is
//! free, which units it is granted, and the no-starvation rule that sets units aside for the
//! head of the ready line.
//!
//! A job's weight is its share of the cap (`-j`): a job of weight W starts only when W units
//! of the cap are free. A named resource is either a count (`mem=32G`, `cpu=8`: any amount up
//! to the total) or a set of named units (`gpu=0,1,2,3`: each unit held by one job at a time).
//! A job holds its weight and its resources from its start until its run is released.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How much of a named resource the run has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stock {
    /// An amount in the resource's base unit (bytes for sizes such as `32G`).
    Count(u64),
    /// Named units, in the order given; ids are distinct.
    Units(Vec<Arc<str>>),
}

impl Stock {
    /// The total: the count, or the number of units.
    pub fn total(&self) -> u64 {
        match self {
            Stock::Count(n) => *n,
            Stock::Units(ids) => ids.len() as u64,
        }
    }
}

/// One named resource of the run (`--resource NAME=…`, the manifest's `[resources]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// Its name, as in `needs` and `LANES_RESOURCE_<NAME>`.
    pub name: Arc<str>,
    /// How much the run has.
    pub stock: Stock,
}

/// What a job needs beyond a free key. A job that declares nothing needs weight 1 and no
/// resource (`JobRequest::needs` is then `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needs {
    /// Units of the cap (`-j`) it holds while it runs; ≥ 1 and ≤ the cap (checked by the
    /// caller).
    pub weight: u32,
    /// (index into the run's resources, amount ≥ 1), at most one entry per resource; each
    /// amount ≤ the resource's total (checked by the caller).
    pub resources: Vec<(usize, u64)>,
}

/// What a job that declares nothing needs: weight 1, no resource.
pub(crate) static ONE: Needs = Needs {
    weight: 1,
    resources: Vec::new(),
};

/// A waiting job's weight: its own, or 1 when it declares none.
pub(crate) fn weight_of(needs: Option<&Needs>) -> usize {
    needs.map_or(1, |n| n.weight as usize)
}

/// What a run holds of one named resource, by index into the run's resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// The resource's index in the run's list.
    pub(crate) index: usize,
    /// The amount (for named units: how many).
    pub(crate) amount: u64,
    /// The granted units' indexes in the resource's list, ascending; empty for a count.
    pub(crate) units: Vec<u32>,
}

/// Everything a run holds beyond its key and slot, from its start to its release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Units of the cap it holds.
    pub weight: u32,
    /// The run's resources, shared by every grant (names and unit ids are not copied).
    pub(crate) catalog: Option<Arc<[Resource]>>,
    /// The named resources it holds, in the order of its needs.
    pub(crate) held: Vec<Held>,
}

impl Grant {
    /// The named resources it holds, in the order of its needs.
    pub fn parts(&self) -> impl Iterator<Item = GrantPart<'_>> {
        self.held.iter().filter_map(|held| {
            let resource = &self.catalog.as_deref()?[held.index];
            Some(GrantPart {
                name: &resource.name,
                amount: held.amount,
                ids: match &resource.stock {
                    Stock::Count(_) => &[],
                    Stock::Units(ids) => ids,
                },
                units: &held.units,
            })
        })
    }

    /// What it holds of resource `name`.
    pub fn part(&self, name: &str) -> Option<GrantPart<'_>> {
        self.parts().find(|part| part.name == name)
    }
}

/// What a run holds of one named resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantPart<'a> {
    /// The resource's name.
    pub name: &'a str,
    /// The amount (for named units: how many).
    pub amount: u64,
    /// The resource's unit ids; empty for a count.
    ids: &'a [Arc<str>],
    /// The granted units' indexes in `ids`.
    units: &'a [u32],
}

impl<'a> GrantPart<'a> {
    /// The named units granted, in the resource's order; none for a count.
    pub fn units(&self) -> impl Iterator<Item = &'a str> + 'a {
        let ids = self.ids;
        self.units.iter().map(move |&u| &*ids[u as usize])
    }

    /// Whether the resource is named units (else an amount).
    pub fn is_units(&self) -> bool {
        !self.ids.is_empty()
    }
}

/// What a job whose key is free is short of, so that it cannot start now (the `cap` and
/// `resource` causes of a wait).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shortage {
    /// Its weight does not fit in the free part of the cap (`-j`).
    Cap,
    /// This named resource has too little free.
    Resource(Arc<str>),
}

/// Where a need does not fit: the cap, or a resource by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Short {
    Cap,
    Resource(usize),
}

/// The no-starvation rule: whether the first job of the ready line that does not fit, having
/// waited `waited`, has what it needs set aside: from then on, later keys start only in what
/// is free beyond its needs, so that what it is short of only grows back as running jobs end,
/// and it starts once enough has. Before `reserve_after` later keys that fit may overtake it
/// (backfill: more throughput, less fairness); `reserve_after` zero sets aside at once.
pub fn reserves(waited: Duration, reserve_after: Duration) -> bool {
    waited >= reserve_after
}

/// Whether `needs` fits in `free_weight` units of the cap and `free` amounts of each
/// resource, after `reserved` (the needs set aside for the head of the ready line) is taken
/// out; else what it is short of. What it would be short of with nothing set aside comes
/// first (the cap before resources, resources in the run's order of its needs): a job short
/// of memory waits for memory, whether or not a slot is set aside for an earlier job. Only a
/// job that would fit but for the set-aside is short of what is set aside, resources before
/// the cap (the README's `resource` cause: "or set aside for an earlier job").
pub(crate) fn short_of(
    needs: &Needs,
    free_weight: usize,
    free: &[u64],
    reserved: Option<&Needs>,
) -> Option<Short> {
    let weight_short = |aside: usize| (needs.weight as usize).saturating_add(aside) > free_weight;
    let resource_short = |reserved: Option<&Needs>| {
        needs.resources.iter().find_map(|&(index, amount)| {
            let aside = reserved.map_or(0, |r| {
                r.resources
                    .iter()
                    .find(|(i, _)| *i == index)
                    .map_or(0, |&(_, a)| a)
            });
            (amount.saturating_add(aside) > free[index]).then_some(Short::Resource(index))
        })
    };
    if weight_short(0) {
        return Some(Short::Cap);
    }
    if let Some(short) = resource_short(None) {
        return Some(short);
    }
    let reserved = reserved?;
    resource_short(Some(reserved))
        .or_else(|| weight_short(reserved.weight as usize).then_some(Short::Cap))
}

/// The run's named resources and what of them is free.
#[derive(Debug)]
pub(crate) struct Pool {
    /// The run's resources, shared with every grant.
    pub(crate) resources: Arc<[Resource]>,
    /// Free amount of each resource (named units: how many are free).
    pub(crate) free: Vec<u64>,
    /// Free named units of each resource, a bit per unit (bit `u % 64` of word `u / 64`);
    /// empty for a count.
    free_units: Vec<Vec<u64>>,
    /// `--sticky-slots`: the named units each key was last granted, per resource index.
    last_units: HashMap<Arc<str>, Vec<(usize, Vec<u32>)>>,
}

impl Pool {
    pub(crate) fn new(resources: Vec<Resource>) -> Self {
        let free = resources.iter().map(|r| r.stock.total()).collect();
        let free_units = resources
            .iter()
            .map(|r| match &r.stock {
                Stock::Count(_) => Vec::new(),
                Stock::Units(ids) => {
                    let mut words = vec![0u64; ids.len().div_ceil(64)];
                    for unit in 0..ids.len() {
                        words[unit / 64] |= 1 << (unit % 64);
                    }
                    words
                }
            })
            .collect();
        Pool {
            resources: Arc::from(resources),
            free,
            free_units,
            last_units: HashMap::new(),
        }
    }

    /// Takes what `needs` asks for (it fits: [`short_of`] said so). Named units go smallest
    /// first; under `sticky` the units `key` was last granted come first where free.
    pub(crate) fn grant(&mut self, key: &Arc<str>, needs: &Needs, sticky: bool) -> Grant {
        let mut held = Vec::with_capacity(needs.resources.len());
        for &(index, amount) in &needs.resources {
            self.free[index] -= amount;
            let mut units: Vec<u32> = Vec::new();
            let words = &mut self.free_units[index];
            if !words.is_empty() {
                units.reserve_exact(amount as usize);
                if sticky {
                    let last = self
                        .last_units
                        .get(key)
                        .and_then(|l| l.iter().find(|(i, _)| *i == index));
                    for &unit in last.map_or(&[][..], |(_, u)| u.as_slice()) {
                        if units.len() as u64 == amount {
                            break;
                        }
                        let (word, bit) = (unit as usize / 64, 1u64 << (unit % 64));
                        if words[word] & bit != 0 {
                            words[word] &= !bit;
                            units.push(unit);
                        }
                    }
                }
                for (w, word) in words.iter_mut().enumerate() {
                    while (units.len() as u64) < amount && *word != 0 {
                        let bit = word.trailing_zeros();
                        *word &= *word - 1;
                        units.push(w as u32 * 64 + bit);
                    }
                }
                debug_assert_eq!(
                    units.len() as u64,
                    amount,
                    "the need fits in the free units"
                );
                units.sort_unstable();
                if sticky {
                    let last = self.last_units.entry(Arc::clone(key)).or_default();
                    match last.iter_mut().find(|(i, _)| *i == index) {
                        Some((_, kept)) => kept.clone_from(&units),
                        None => last.push((index, units.clone())),
                    }
                }
            }
            held.push(Held {
                index,
                amount,
                units,
            });
        }
        Grant {
            weight: needs.weight,
            catalog: Some(Arc::clone(&self.resources)),
            held,
        }
    }

    /// Gives back what a run held.
    pub(crate) fn give_back(&mut self, grant: &Grant) {
        for held in &grant.held {
            self.free[held.index] += held.amount;
            let words = &mut self.free_units[held.index];
            for &unit in &held.units {
                words[unit as usize / 64] |= 1 << (unit % 64);
            }
        }
    }

    /// The name of resource `index`.
    pub(crate) fn name(&self, index: usize) -> &Arc<str> {
        &self.resources[index].name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(weight: u32, resources: &[(usize, u64)]) -> Needs {
        Needs {
            weight,
            resources: resources.to_vec(),
        }
    }

    #[test]
    fn the_cap_is_checked_before_resources() {
        assert_eq!(
            short_of(&needs(3, &[(0, 5)]), 2, &[1], None),
            Some(Short::Cap)
        );
        assert_eq!(
            short_of(&needs(2, &[(0, 5)]), 2, &[1], None),
            Some(Short::Resource(0))
        );
        assert_eq!(short_of(&needs(2, &[(0, 1)]), 2, &[1], None), None);
        assert_eq!(short_of(&ONE, 1, &[], None), None);
        assert_eq!(short_of(&ONE, 0, &[], None), Some(Short::Cap));
    }

    #[test]
    fn what_is_set_aside_is_not_free() {
        let head = needs(2, &[(1, 3)]);
        // 4 free of the cap, 2 set aside: a weight-2 job fits, a weight-3 one does not.
        assert_eq!(short_of(&needs(2, &[]), 4, &[9, 3], Some(&head)), None);
        assert_eq!(
            short_of(&needs(3, &[]), 4, &[9, 3], Some(&head)),
            Some(Short::Cap)
        );
        // Resource 1 has exactly the head's 3 free: nothing of it is left for others.
        assert_eq!(
            short_of(&needs(1, &[(1, 1)]), 4, &[9, 3], Some(&head)),
            Some(Short::Resource(1))
        );
        // Resource 0 is not the head's: all of it is free for others.
        assert_eq!(
            short_of(&needs(1, &[(0, 9)]), 4, &[9, 3], Some(&head)),
            None
        );
    }

    #[test]
    fn what_a_job_is_short_of_with_nothing_set_aside_comes_before_the_set_aside() {
        // One unit of the cap free and 1 of resource 0; the head, needing 1 and 3, has them
        // set aside. A job needing 3 of resource 0 waits for it, not for the cap: it would
        // wait for it with nothing set aside.
        let head = needs(1, &[(0, 3)]);
        assert_eq!(
            short_of(&needs(1, &[(0, 3)]), 1, &[1], Some(&head)),
            Some(Short::Resource(0))
        );
        // A job that would fit but for the set-aside: the resource set aside first, then
        // the cap.
        assert_eq!(
            short_of(&needs(1, &[(0, 1)]), 1, &[1], Some(&head)),
            Some(Short::Resource(0))
        );
        assert_eq!(
            short_of(&needs(1, &[]), 1, &[1], Some(&head)),
            Some(Short::Cap)
        );
        // Short of the cap with nothing set aside: the cap, whatever else it lacks.
        assert_eq!(
            short_of(&needs(2, &[(0, 3)]), 1, &[1], Some(&head)),
            Some(Short::Cap)
        );
    }

    #[test]
    fn reservation_starts_at_the_bound() {
        let bound = Duration::from_secs(2);
        assert!(!reserves(Duration::from_millis(1999), bound));
        assert!(reserves(bound, bound));
        assert!(reserves(Duration::ZERO, Duration::ZERO));
    }

    #[test]
    fn units_go_smallest_first_and_sticky_keys_get_theirs_back() {
        let ids: Vec<Arc<str>> = ["0", "1", "2", "3"].into_iter().map(Arc::from).collect();
        let mut pool = Pool::new(vec![Resource {
            name: Arc::from("gpu"),
            stock: Stock::Units(ids),
        }]);
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let two = needs(1, &[(0, 2)]);
        let first = pool.grant(&b, &needs(1, &[(0, 1)]), true);
        let second = pool.grant(&a, &two, true);
        let units = |grant: &Grant| {
            grant
                .part("gpu")
                .unwrap()
                .units()
                .collect::<Vec<_>>()
                .join(",")
        };
        assert_eq!(units(&first), "0");
        assert_eq!(units(&second), "1,2");
        assert_eq!(pool.free, vec![1]);
        pool.give_back(&first);
        pool.give_back(&second);
        assert_eq!(pool.free, vec![4]);
        // Key a gets units 1 and 2 again although 0 is free; without stickiness, 0 and 1.
        let again = pool.grant(&a, &two, true);
        assert_eq!(units(&again), "1,2");
        pool.give_back(&again);
        let plain = pool.grant(&a, &two, false);
        assert_eq!(units(&plain), "0,1");
    }
}

#[cfg(test)]
mod bitset_tests {
    use super::*;

    #[test]
    fn more_than_64_units_are_handed_out_and_given_back() {
        let ids: Vec<Arc<str>> = (0..130).map(|i| Arc::from(i.to_string())).collect();
        let mut pool = Pool::new(vec![Resource {
            name: Arc::from("port"),
            stock: Stock::Units(ids),
        }]);
        let key: Arc<str> = Arc::from("k");
        let many = Needs {
            weight: 1,
            resources: vec![(0, 100)],
        };
        let first = pool.grant(&key, &many, false);
        let units: Vec<&str> = first.part("port").unwrap().units().collect();
        assert_eq!(units.len(), 100);
        assert_eq!((units[0], units[64], units[99]), ("0", "64", "99"));
        let rest = Needs {
            weight: 1,
            resources: vec![(0, 30)],
        };
        let second = pool.grant(&key, &rest, false);
        let units: Vec<&str> = second.part("port").unwrap().units().collect();
        assert_eq!((units[0], units[29]), ("100", "129"));
        assert_eq!(pool.free, vec![0]);
        pool.give_back(&first);
        let third = pool.grant(&key, &rest, false);
        assert_eq!(third.part("port").unwrap().units().next(), Some("0"));
    }
}
