//! Sizes a region sells (PV-23, issue 29): "A plan not sold there is refused before anything is
//! made, naming the plans that are; a region selling none is refused."

use capstan_events::provisioning::rpc::RegionOffer;

/// Why a provision's region or size is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OfferRefusal {
    #[error("the provider has no region {region:?}; it has: {known}")]
    NoSuchRegion { region: String, known: String },
    #[error("region {region} sells no size at all")]
    RegionSellsNothing { region: String },
    #[error("size {size:?} is not sold in {region}; it sells: {sold}")]
    NotSoldThere {
        size: String,
        region: String,
        sold: String,
    },
}

/// Checks that `region` exists in the offer and sells `size`.
pub fn check_size(offer: &[RegionOffer], region: &str, size: &str) -> Result<(), OfferRefusal> {
    let Some(found) = offer.iter().find(|each| each.id == region) else {
        let mut known: Vec<&str> = offer.iter().map(|each| each.id.as_str()).collect();
        known.sort_unstable();
        return Err(OfferRefusal::NoSuchRegion {
            region: region.to_string(),
            known: listed(&known),
        });
    };
    if found.sizes.is_empty() {
        return Err(OfferRefusal::RegionSellsNothing {
            region: region.to_string(),
        });
    }
    if found.sizes.iter().any(|sold| sold.id == size) {
        return Ok(());
    }
    let sold: Vec<&str> = found.sizes.iter().map(|sold| sold.id.as_str()).collect();
    Err(OfferRefusal::NotSoldThere {
        size: size.to_string(),
        region: region.to_string(),
        sold: listed(&sold),
    })
}

fn listed(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::provisioning::rpc::SizeOffer;

    fn size(id: &str) -> SizeOffer {
        SizeOffer {
            id: id.into(),
            vcpus: 1,
            memory_mb: 1024,
            disk_gb: 25,
        }
    }

    fn offer() -> Vec<RegionOffer> {
        vec![
            RegionOffer {
                id: "us-east".into(),
                sizes: vec![size("g6-nanode-1"), size("g6-standard-2")],
            },
            RegionOffer {
                id: "eu-west".into(),
                sizes: vec![],
            },
        ]
    }

    #[test]
    fn pv_23_a_size_the_region_sells_is_accepted() {
        assert_eq!(check_size(&offer(), "us-east", "g6-standard-2"), Ok(()));
    }

    #[test]
    fn pv_23_a_size_not_sold_in_the_region_is_refused_naming_the_ones_that_are() {
        let refused = check_size(&offer(), "us-east", "g6-dedicated-8").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "size \"g6-dedicated-8\" is not sold in us-east; it sells: g6-nanode-1, g6-standard-2"
        );
    }

    #[test]
    fn pv_23_a_region_selling_none_and_an_unknown_region_are_refused() {
        assert_eq!(
            check_size(&offer(), "eu-west", "g6-nanode-1"),
            Err(OfferRefusal::RegionSellsNothing {
                region: "eu-west".into()
            })
        );
        let unknown = check_size(&offer(), "mars-1", "g6-nanode-1").unwrap_err();
        assert!(
            unknown.to_string().contains("eu-west, us-east"),
            "{unknown}"
        );
    }
}
