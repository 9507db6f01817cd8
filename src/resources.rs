//! Named resources as written by people: `--resource NAME=N|ID,ID,…`, `--needs NAME=N,…`,
//! sizes such as `32G`, resource names, and the environment variables that hand granted units
//! to a job. Pure parsing and checking; the scheduling of resources is the core's
//! ([`crate::core::Resource`], [`crate::core::Needs`]).

use std::sync::Arc;

use crate::core::{Grant, Needs, Resource, Stock};

/// The longest resource name, in bytes.
const MAX_NAME: usize = 64;

/// Checks a resource name: a lowercase ASCII letter, then lowercase letters, digits or `_`,
/// at most 64 bytes, so that `LANES_RESOURCE_<NAME>` and `{res.NAME}` are plain words.
///
/// # Errors
/// Why the name is refused, for people.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let good = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= MAX_NAME;
    if good {
        Ok(())
    } else {
        Err(format!(
            "resource name {name:?} must be a lowercase letter followed by lowercase letters, \
             digits or `_` (at most {MAX_NAME})"
        ))
    }
}

/// Parses an amount: a whole number, optionally followed by `K`, `M`, `G`, `T` or `P` (or
/// `KiB`, `MiB`, …; either case), each 1024 times the one before, as Slurm's `--mem` and
/// GNU coreutils read them: `8G` is 8 × 2³⁰. At least 1.
///
/// # Errors
/// A malformed amount (`8GG`, `1.5G`, `-1`, empty), zero, or one past 2⁶⁴ − 1.
pub(crate) fn parse_amount(text: &str) -> Result<u64, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        "p" | "pib" => 50,
        _ => {
            return Err(format!(
                "{text:?} is not an amount (a whole number, optionally followed by K, M, G, T \
                 or P, powers of 1024)"
            ))
        }
    };
    if digits.is_empty() {
        return Err(format!("{text:?} is not an amount: it has no number"));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is too large an amount"))?;
    if n == 0 {
        return Err(format!(
            "{text:?}: an amount must be at least 1 (leave the resource out instead)"
        ));
    }
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too large an amount"))
}

/// Parses named units: distinct, non-empty ids without whitespace, commas or control
/// characters (a job is handed its units as a comma list, `LANES_RESOURCE_<NAME>`).
///
/// # Errors
/// An empty id, an id with whitespace, a comma or a control character (NUL included), or an
/// id given twice.
pub(crate) fn parse_units<'a>(ids: impl IntoIterator<Item = &'a str>) -> Result<Stock, String> {
    parse_units_at(ids).map_err(|(_, message)| message)
}

/// [`parse_units`], an error with the index of the id it is about (the first, for none).
///
/// # Errors
/// As [`parse_units`].
pub(crate) fn parse_units_at<'a>(
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<Stock, (usize, String)> {
    let mut units: Vec<Arc<str>> = Vec::new();
    for (index, id) in ids.into_iter().enumerate() {
        if id.is_empty()
            || id
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == ',')
        {
            return Err((
                index,
                format!(
                    "unit id {id:?} must be non-empty, without whitespace, commas or control \
                     characters"
                ),
            ));
        }
        if units.iter().any(|u| &**u == id) {
            return Err((index, format!("unit id {id:?} is given twice")));
        }
        units.push(Arc::from(id));
    }
    if units.is_empty() {
        return Err((0, "no unit ids given".into()));
    }
    Ok(Stock::Units(units))
}

/// Parses `--resource NAME=SPEC`: `NAME=N` (an amount, [`parse_amount`]) or
/// `NAME=ID,ID,…` (named units; a single named unit is written with a trailing comma,
/// `port=8001,`).
///
/// # Errors
/// For people, without the flag's name.
pub(crate) fn parse_resource(text: &str) -> Result<Resource, String> {
    let (name, spec) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not NAME=N or NAME=ID,ID,…"))?;
    check_name(name)?;
    let stock = if spec.contains(',') {
        let ids = spec.strip_suffix(',').unwrap_or(spec);
        if let Some(id) = ids.split(',').find(|id| id.contains('=')) {
            // `--resource a=1,b=2`: two resources meant, as `--needs` would take them.
            return Err(format!(
                "unit id {id:?} holds `=`: give each resource its own --resource \
                 (--resource {name}=… --resource {}=…)",
                id.split('=').next().unwrap_or_default()
            ));
        }
        parse_units(ids.split(','))?
    } else {
        Stock::Count(parse_amount(spec)?)
    };
    Ok(Resource {
        name: Arc::from(name),
        stock,
    })
}

/// One need as written: a resource's name and an amount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Need {
    /// The resource's name (not yet checked against the run's resources).
    pub name: String,
    /// ≥ 1.
    pub amount: u64,
    /// Written as a size (`8G`): an amount of a resource, never a count of named units.
    pub sized: bool,
}

/// `n` bytes as the largest binary unit that divides it (`3G`, `1536M`), else in bytes.
fn size_text(n: u64) -> String {
    for (shift, unit) in [(50, 'P'), (40, 'T'), (30, 'G'), (20, 'M'), (10, 'K')] {
        if n != 0 && n % (1u64 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// Whether an amount is written as a size: with a suffix (`8G`), not as a bare count.
pub(crate) fn is_size(text: &str) -> bool {
    !text
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .is_empty()
}

/// Parses `--needs NAME=N,NAME=N,…`.
///
/// # Errors
/// A malformed item, a bad name or amount, or a name given twice.
pub(crate) fn parse_needs(text: &str) -> Result<Vec<Need>, String> {
    let mut needs: Vec<Need> = Vec::new();
    for item in text.split(',') {
        let (name, amount) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?} is not NAME=N"))?;
        check_name(name)?;
        if needs.iter().any(|n| n.name == name) {
            return Err(format!("resource {name:?} is needed twice"));
        }
        needs.push(Need {
            name: name.to_owned(),
            amount: parse_amount(amount)?,
            sized: is_size(amount),
        });
    }
    Ok(needs)
}

/// Which part of a job's weight and needs [`resolve`] refuses, so that an error can point at
/// where it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NeedFault {
    /// The weight is above the cap.
    Weight,
    /// The need at this index names no resource of the run.
    Name(usize),
    /// The need at this index asks for more than the run has, or for a size of named units.
    Amount(usize),
}

/// Resolves a job's weight and needs against the run's resources and cap into what the core
/// schedules; `None` for weight 1 and no need (the core's fast path).
///
/// # Errors
/// `(fault, message)`: which part is refused ([`NeedFault`]) and why.
pub(crate) fn resolve(
    weight: u32,
    needs: &[Need],
    resources: &[Resource],
    cap: usize,
) -> Result<Option<Arc<Needs>>, (NeedFault, String)> {
    if weight as usize > cap {
        return Err((
            NeedFault::Weight,
            format!(
                "weight {weight} is more than the cap of {cap} (-j): the job could never start"
            ),
        ));
    }
    let mut resolved = Vec::with_capacity(needs.len());
    for (i, need) in needs.iter().enumerate() {
        let Some(index) = resources.iter().position(|r| *r.name == need.name) else {
            let known: Vec<&str> = resources.iter().map(|r| &*r.name).collect();
            return Err((
                NeedFault::Name(i),
                format!(
                    "unknown resource {:?} (the run has {}; declare it with --resource or \
                     [resources])",
                    need.name,
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        };
        let stock = &resources[index].stock;
        if need.sized && matches!(stock, Stock::Units(_)) {
            return Err((
                NeedFault::Amount(i),
                format!(
                    "resource {:?} is {} named units: a job needs a count of them, such as 1, \
                     not a size",
                    need.name,
                    stock.total()
                ),
            ));
        }
        let total = stock.total();
        if need.amount > total {
            // Sizes as written (`3G`), when the need was one.
            let shown = |n: u64| {
                if need.sized {
                    size_text(n)
                } else {
                    n.to_string()
                }
            };
            return Err((
                NeedFault::Amount(i),
                format!(
                    "needs {} of {:?}, more than the {} the run has: the job could never start",
                    shown(need.amount),
                    need.name,
                    shown(total)
                ),
            ));
        }
        resolved.push((index, need.amount));
    }
    Ok((weight != 1 || !resolved.is_empty()).then(|| {
        Arc::new(Needs {
            weight,
            resources: resolved,
        })
    }))
}

/// What is wrong with handing `needs` to a job, if anything: named units it needs so many of
/// (or with ids so long) that `LANES_RESOURCE_<NAME>=ID,ID,…` could be longer than one
/// environment string may be ([`crate::arg_limit::max_argument_bytes`]), which would fail its
/// every start with E2BIG. Counted for the longest ids it could be granted.
pub(crate) fn too_long_to_hand(needs: &Needs, resources: &[Resource]) -> Option<String> {
    needs.resources.iter().find_map(|&(index, amount)| {
        let resource = resources.get(index)?;
        let Stock::Units(ids) = &resource.stock else {
            return None;
        };
        let variable = env_name(&resource.name);
        let most = crate::arg_limit::max_argument_bytes();
        // As many of the longest id and a comma fit: no need to count them one by one.
        let longest_id = ids.iter().map(|id| id.len()).max().unwrap_or(0);
        let bound = usize::try_from(amount)
            .unwrap_or(usize::MAX)
            .saturating_mul(longest_id + 1);
        if variable.len() + 1 + bound <= most {
            return None;
        }
        let mut lengths: Vec<usize> = ids.iter().map(|id| id.len()).collect();
        lengths.sort_unstable_by(|a, b| b.cmp(a));
        let count = usize::try_from(amount)
            .unwrap_or(usize::MAX)
            .min(lengths.len());
        let value: usize = lengths[..count].iter().sum::<usize>() + count.saturating_sub(1);
        let longest = variable.len() + 1 + value;
        (longest > most).then(|| {
            format!(
                "{amount} units of {:?} are handed to a job as {variable}, which would be up to \
                 {longest} bytes, more than one environment string may be ({most} bytes): ask \
                 for fewer units, or give the resource as a count",
                resource.name
            )
        })
    })
}

/// The environment variable that hands resource `name` to a job: `LANES_RESOURCE_GPU`.
pub(crate) fn env_name(name: &str) -> String {
    format!("LANES_RESOURCE_{}", name.to_ascii_uppercase())
}

/// What a job is handed of one granted resource: its named units joined by commas, or the
/// amount for a count.
pub(crate) fn granted_value(grant: &Grant, name: &str) -> Option<String> {
    grant.part(name).map(|part| part_value(&part))
}

/// Each resource `grant` holds, by name, with what the job is handed of it
/// ([`granted_value`]), in the order of its needs.
pub(crate) fn granted_values(grant: &Grant) -> impl Iterator<Item = (&str, String)> {
    grant.parts().map(|part| (part.name, part_value(&part)))
}

/// A granted part's units joined by commas, or its amount for a count.
fn part_value(part: &crate::core::GrantPart<'_>) -> String {
    if part.is_units() {
        part.units().collect::<Vec<_>>().join(",")
    } else {
        part.amount.to_string()
    }
}

/// The named resources Slurm can be asked for, and as what: `gpu`, an amount, as
/// `--gres=gpu:N` (the cluster picks the GPUs and tells the job, `CUDA_VISIBLE_DEVICES`);
/// `mem`, an amount in bytes, as `--mem=SIZEM` (mebibytes, rounded up); any other amount as
/// a cluster license of the same name, `--licenses=NAME:N` (whether the cluster has such a
/// license is checked at start, [`slurm_license_names`]).
///
/// # Errors
/// Named units: the cluster picks GPUs itself, and a license is a count.
pub(crate) fn check_slurm_resources(resources: &[Resource]) -> Result<(), String> {
    for resource in resources {
        match (&*resource.name, &resource.stock) {
            (_, Stock::Count(_)) => {}
            ("gpu", Stock::Units(_)) => {
                return Err(
                    "with --backend slurm the cluster picks the GPUs: give `gpu` as a \
                            count (--resource gpu=4), not as named units"
                        .into(),
                )
            }
            ("mem", Stock::Units(_)) => {
                return Err("`mem` is an amount such as 32G, not named units".into())
            }
            (name, Stock::Units(_)) => {
                return Err(format!(
                    "resource {name:?} is named units, which Slurm cannot be asked for: give \
                     it as a count (--resource {name}=N), asked of the cluster as its license \
                     {name:?} (srun --licenses)"
                ))
            }
        }
    }
    Ok(())
}

/// The resources a Slurm run asks of the cluster as licenses: every one but `gpu` and `mem`.
pub(crate) fn slurm_license_names(resources: &[Resource]) -> impl Iterator<Item = &str> {
    resources
        .iter()
        .map(|resource| &*resource.name)
        .filter(|name| !matches!(*name, "gpu" | "mem"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_shown_in_the_largest_unit_that_divides_them() {
        assert_eq!(size_text(3 << 30), "3G");
        assert_eq!(size_text(1536 << 20), "1536M");
        assert_eq!(size_text(1000), "1000");
        assert_eq!(size_text(0), "0");
        assert_eq!(size_text(1 << 50), "1P");
    }

    #[test]
    fn amounts_are_whole_numbers_with_binary_suffixes() {
        assert_eq!(parse_amount("8"), Ok(8));
        assert_eq!(parse_amount("8G"), Ok(8 << 30));
        assert_eq!(parse_amount("512m"), Ok(512 << 20));
        assert_eq!(parse_amount("2KiB"), Ok(2048));
        assert_eq!(parse_amount("1T"), Ok(1 << 40));
        for bad in ["8GG", "1.5G", "-1", "", "G", "8 G", "8GB", "0", "0G", "x"] {
            assert!(parse_amount(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(parse_amount("20000000P").unwrap_err().contains("too large"));
        assert!(parse_amount("99999999999999999999").is_err());
    }

    #[test]
    fn resources_are_counts_or_named_units() {
        let mem = parse_resource("mem=32G").unwrap();
        assert_eq!((&*mem.name, mem.stock), ("mem", Stock::Count(32 << 30)));
        let gpu = parse_resource("gpu=0,1,2,3").unwrap();
        assert_eq!(gpu.stock.total(), 4);
        let port = parse_resource("port=8001,").unwrap();
        assert_eq!(port.stock, Stock::Units(vec![Arc::from("8001")]));
        assert!(parse_resource("gpu=0,1,1").unwrap_err().contains("twice"));
        assert!(parse_resource("gpu=0,,1").is_err());
        assert_eq!(
            parse_resource("a=1,b=2").unwrap_err(),
            "unit id \"b=2\" holds `=`: give each resource its own --resource \
             (--resource a=… --resource b=…)"
        );
        assert!(parse_resource("gpu").is_err());
        assert!(parse_resource("GPU=1").is_err());
        assert!(parse_resource("mem=8GG").is_err());
        assert!(parse_resource("cpu=0").is_err());
    }

    #[test]
    fn needs_are_named_amounts_each_once() {
        assert_eq!(
            parse_needs("gpu=1,mem=8G").unwrap(),
            vec![
                Need {
                    name: "gpu".into(),
                    amount: 1,
                    sized: false
                },
                Need {
                    name: "mem".into(),
                    amount: 8 << 30,
                    sized: true
                }
            ]
        );
        assert!(parse_needs("gpu=1,gpu=2").unwrap_err().contains("twice"));
        assert!(parse_needs("gpu").is_err());
        assert!(parse_needs("gpu=0").is_err());
        assert!(parse_needs("").is_err());
    }

    #[test]
    fn needs_resolve_against_the_run() {
        let resources = vec![
            parse_resource("gpu=0,1").unwrap(),
            parse_resource("mem=8G").unwrap(),
        ];
        let needs = parse_needs("mem=4G,gpu=2").unwrap();
        let resolved = resolve(2, &needs, &resources, 4).unwrap().unwrap();
        assert_eq!(resolved.weight, 2);
        assert_eq!(resolved.resources, vec![(1, 4 << 30), (0, 2)]);
        assert_eq!(resolve(1, &[], &resources, 4), Ok(None));
        let err = resolve(1, &parse_needs("tpu=1").unwrap(), &resources, 4).unwrap_err();
        assert_eq!(err.0, NeedFault::Name(0));
        assert!(err.1.contains("unknown resource \"tpu\""), "{}", err.1);
        let err = resolve(1, &parse_needs("mem=1,gpu=3").unwrap(), &resources, 4).unwrap_err();
        assert_eq!(err.0, NeedFault::Amount(1));
        assert!(err.1.contains("could never start"));
        assert_eq!(
            resolve(5, &needs, &resources, 4).unwrap_err().0,
            NeedFault::Weight
        );
    }

    #[test]
    fn units_are_handed_over_as_a_comma_list() {
        use crate::core::{JobRequest, Limits, Scheduler};
        assert_eq!(env_name("gpu"), "LANES_RESOURCE_GPU");
        assert!(check_name("gpu_2").is_ok());
        assert!(check_name("2gpu").is_err());
        assert!(check_name("gpu-a").is_err());
        let resources = vec![
            parse_resource("gpu=a,b,c").unwrap(),
            parse_resource("mem=1K").unwrap(),
        ];
        let needs = resolve(1, &parse_needs("gpu=2,mem=1K").unwrap(), &resources, 2).unwrap();
        let mut core = Scheduler::new(Limits {
            max_concurrent: 2,
            max_queued: 10,
        });
        core.set_resources(resources);
        let request = JobRequest {
            seq: 1,
            key: Arc::from("k"),
            rank: 0,
            timeout: None,
            weight: 0,
            needs,
        };
        let _ = core.admit(request, std::time::Duration::ZERO);
        let start = core.take(std::time::Duration::ZERO).unwrap();
        let grant = start.grant.unwrap();
        assert_eq!(granted_value(&grant, "gpu").as_deref(), Some("a,b"));
        assert_eq!(granted_value(&grant, "mem").as_deref(), Some("1024"));
        assert_eq!(granted_value(&grant, "cpu"), None);
    }

    #[test]
    fn unit_ids_that_cannot_be_handed_over_are_refused() {
        for bad in ["a,b", "x\0y", "tab\tid", "", "bell\u{7}"] {
            let err = parse_units([bad, "c"]).expect_err(bad);
            assert!(err.contains("must be non-empty"), "{bad:?}: {err}");
        }
        assert!(parse_units(["gpu-0", "gpu:1"]).is_ok());
    }

    #[test]
    fn units_too_many_to_hand_in_one_environment_string_are_told_before_the_run() {
        let ids: Vec<Arc<str>> = (0..30_000).map(|i| Arc::from(i.to_string())).collect();
        let resources = [Resource {
            name: Arc::from("gpu"),
            stock: Stock::Units(ids),
        }];
        let needs = |amount| Needs {
            weight: 1,
            resources: vec![(0, amount)],
        };
        assert_eq!(too_long_to_hand(&needs(8), &resources), None);
        let message = too_long_to_hand(&needs(30_000), &resources).expect("too long");
        assert!(
            message.starts_with("30000 units of \"gpu\" are handed to a job as LANES_RESOURCE_GPU"),
            "{message}"
        );
        // Counts are handed as a number, whatever their size.
        let count = [Resource {
            name: Arc::from("mem"),
            stock: Stock::Count(u64::MAX),
        }];
        assert_eq!(too_long_to_hand(&needs(u64::MAX), &count), None);
    }
}
