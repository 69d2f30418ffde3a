//! BK-05, BK-08: the fleet policy and each node's position. The fleet default is on; a node
//! following the fleet stores nothing and follows its future changes; a node's own schedule
//! freezes the whole field set; off is a stored decision.

use capstan_events::backups::rpc::{
    BackupMode, FleetPolicy, NodePolicyBody, PolicyFields, Position,
};
use capstan_events::rpc::InvalidInput;

use super::retention::Tiers;
use capstan_events::Word as _;

/// The built-in fleet policy, in force until an operator saves one (BK-05: on).
pub fn default_fleet() -> FleetPolicy {
    FleetPolicy {
        enabled: true,
        fields: PolicyFields {
            every_minutes: 24 * 60,
            window_start_hour: 0,
            window_hours: 24,
            mode: BackupMode::Chain,
            // BK-10: the floor, 7 days.
            keep_days: 7,
            full_every_days: 7,
            // BK-18: weekly.
            verify_every_days: 7,
            // Beyond the spec: no tiers until an operator asks for them.
            keep_daily: 0,
            keep_weekly: 0,
            keep_monthly: 0,
        },
    }
}

/// Checks every field's range, naming the first one out of it.
pub fn check_fields(fields: &PolicyFields) -> Result<(), InvalidInput> {
    let range = |name: &'static str, value: u32, low: u32, high: u32| {
        if (low..=high).contains(&value) {
            Ok(())
        } else {
            Err(InvalidInput::new(
                name,
                format!("{value} is outside {low}..={high}"),
            ))
        }
    };
    range("every_minutes", fields.every_minutes, 1, 10_080)?;
    range(
        "window_start_hour",
        u32::from(fields.window_start_hour),
        0,
        23,
    )?;
    range("window_hours", u32::from(fields.window_hours), 1, 24)?;
    range("keep_days", fields.keep_days, 1, 3650)?;
    range("full_every_days", fields.full_every_days, 1, 365)?;
    range("verify_every_days", fields.verify_every_days, 0, 365)?;
    range("keep_daily", fields.keep_daily, 0, 3650)?;
    range("keep_weekly", fields.keep_weekly, 0, 520)?;
    range("keep_monthly", fields.keep_monthly, 0, 120)?;
    Ok(())
}

/// The retention tiers a schedule asks for (beyond the spec), as the storage pass takes them.
pub fn tiers(fields: &PolicyFields) -> Tiers {
    Tiers {
        daily: fields.keep_daily,
        weekly: fields.keep_weekly,
        monthly: fields.keep_monthly,
    }
}

/// What a node's row holds: nothing (fleet), its own frozen set, or off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    Fleet,
    Own(PolicyFields),
    Off,
}

impl Stored {
    pub fn position(&self) -> Position {
        match self {
            Stored::Fleet => Position::Fleet,
            Stored::Own(_) => Position::Own,
            Stored::Off => Position::Off,
        }
    }
}

/// The schedule that applies to a node: whether it is scheduled, and its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub scheduled: bool,
    pub fields: PolicyFields,
}

/// BK-08: the node's own decision overrides the fleet's settings.
pub fn effective(fleet: &FleetPolicy, stored: &Stored) -> Effective {
    match stored {
        Stored::Fleet => Effective {
            scheduled: fleet.enabled,
            fields: fleet.fields.clone(),
        },
        Stored::Own(fields) => Effective {
            scheduled: true,
            fields: fields.clone(),
        },
        Stored::Off => Effective {
            scheduled: false,
            fields: fleet.fields.clone(),
        },
    }
}

/// Reads a `PUT /api/v1/nodes/{id}/backups/policy` body into what is stored. `own` freezes
/// the whole set: a field left out takes the fleet's value of the moment. `fleet` and `off`
/// take no field.
pub fn decide(body: &NodePolicyBody, fleet: &FleetPolicy) -> Result<Stored, InvalidInput> {
    let position = Position::parse(&body.position).ok_or_else(|| {
        InvalidInput::new(
            "position",
            format!("{:?} is not fleet, own or off", body.position),
        )
    })?;
    let any_field = body.every_minutes.is_some()
        || body.window_start_hour.is_some()
        || body.window_hours.is_some()
        || body.mode.is_some()
        || body.keep_days.is_some()
        || body.full_every_days.is_some()
        || body.verify_every_days.is_some()
        || body.keep_daily.is_some()
        || body.keep_weekly.is_some()
        || body.keep_monthly.is_some();
    match position {
        Position::Fleet | Position::Off if any_field => Err(InvalidInput::new(
            "position",
            format!(
                "{} stores no schedule of its own: leave the fields out",
                position.as_str()
            ),
        )),
        Position::Fleet => Ok(Stored::Fleet),
        Position::Off => Ok(Stored::Off),
        Position::Own => {
            let base = &fleet.fields;
            let mode = match &body.mode {
                Some(text) => BackupMode::parse(text).ok_or_else(|| {
                    InvalidInput::new("mode", format!("{text:?} is not chain or full_only"))
                })?,
                None => base.mode,
            };
            let fields = PolicyFields {
                every_minutes: body.every_minutes.unwrap_or(base.every_minutes),
                window_start_hour: body.window_start_hour.unwrap_or(base.window_start_hour),
                window_hours: body.window_hours.unwrap_or(base.window_hours),
                mode,
                keep_days: body.keep_days.unwrap_or(base.keep_days),
                full_every_days: body.full_every_days.unwrap_or(base.full_every_days),
                verify_every_days: body.verify_every_days.unwrap_or(base.verify_every_days),
                keep_daily: body.keep_daily.unwrap_or(base.keep_daily),
                keep_weekly: body.keep_weekly.unwrap_or(base.keep_weekly),
                keep_monthly: body.keep_monthly.unwrap_or(base.keep_monthly),
            };
            check_fields(&fields)?;
            Ok(Stored::Own(fields))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet() -> FleetPolicy {
        default_fleet()
    }

    fn body(position: &str) -> NodePolicyBody {
        NodePolicyBody {
            position: position.into(),
            ..NodePolicyBody::default()
        }
    }

    #[test]
    fn bk_05_the_fleet_default_is_on() {
        let fleet = fleet();
        assert!(fleet.enabled);
        assert!(effective(&fleet, &Stored::Fleet).scheduled);
    }

    #[test]
    fn bk_08_fleet_position_stores_nothing_and_follows_future_fleet_changes() {
        let mut fleet = fleet();
        assert_eq!(decide(&body("fleet"), &fleet), Ok(Stored::Fleet));
        fleet.fields.every_minutes = 60;
        assert_eq!(effective(&fleet, &Stored::Fleet).fields.every_minutes, 60);
        fleet.enabled = false;
        assert!(!effective(&fleet, &Stored::Fleet).scheduled);
    }

    #[test]
    fn bk_08_own_schedule_freezes_the_full_field_set_against_later_fleet_changes() {
        let mut fleet = fleet();
        let mut asked = body("own");
        asked.every_minutes = Some(120);
        let stored = decide(&asked, &fleet).unwrap();
        let Stored::Own(fields) = &stored else {
            panic!("own is stored as its fields: {stored:?}")
        };
        // The fields left out are frozen at the fleet's values of the moment.
        assert_eq!(fields.every_minutes, 120);
        assert_eq!(fields.keep_days, 7);
        assert_eq!(fields.verify_every_days, 7);
        fleet.fields.keep_days = 30;
        fleet.fields.verify_every_days = 1;
        fleet.enabled = false;
        let applied = effective(&fleet, &stored);
        assert!(
            applied.scheduled,
            "a node of its own is scheduled whatever the fleet says"
        );
        assert_eq!(applied.fields.keep_days, 7);
        assert_eq!(applied.fields.verify_every_days, 7);
    }

    #[test]
    fn bk_08_off_is_stored_as_a_decision_and_never_scheduled() {
        let fleet = fleet();
        let stored = decide(&body("off"), &fleet).unwrap();
        assert_eq!(stored, Stored::Off);
        assert_eq!(stored.position(), Position::Off);
        assert!(!effective(&fleet, &stored).scheduled);
    }

    #[test]
    fn bk_08_fleet_and_off_take_no_fields_and_bad_values_are_named() {
        let fleet = fleet();
        let mut off = body("off");
        off.keep_days = Some(3);
        assert_eq!(decide(&off, &fleet).unwrap_err().field, "position");
        assert_eq!(
            decide(&body("sometimes"), &fleet).unwrap_err().field,
            "position"
        );
        let mut own = body("own");
        own.window_hours = Some(0);
        assert_eq!(decide(&own, &fleet).unwrap_err().field, "window_hours");
        let mut own = body("own");
        own.mode = Some("weekly".into());
        assert_eq!(decide(&own, &fleet).unwrap_err().field, "mode");
        let mut own = body("own");
        own.every_minutes = Some(0);
        assert_eq!(decide(&own, &fleet).unwrap_err().field, "every_minutes");
    }

    #[test]
    fn tiers_are_frozen_with_a_nodes_own_schedule_and_out_of_range_tiers_are_named() {
        let mut fleet = fleet();
        fleet.fields.keep_weekly = 4;
        let mut own = body("own");
        own.keep_daily = Some(14);
        let Stored::Own(fields) = decide(&own, &fleet).unwrap() else {
            panic!("own")
        };
        assert_eq!(
            (fields.keep_daily, fields.keep_weekly, fields.keep_monthly),
            (14, 4, 0),
            "a tier left out is frozen at the fleet's value"
        );
        type SetTier = fn(&mut NodePolicyBody);
        let cases: [(&str, SetTier); 3] = [
            ("keep_daily", |b| b.keep_daily = Some(3651)),
            ("keep_weekly", |b| b.keep_weekly = Some(521)),
            ("keep_monthly", |b| b.keep_monthly = Some(121)),
        ];
        for (name, set) in cases {
            let mut own = body("own");
            set(&mut own);
            assert_eq!(decide(&own, &fleet).unwrap_err().field, name);
            let mut off = body("off");
            set(&mut off);
            assert_eq!(decide(&off, &fleet).unwrap_err().field, "position");
        }
        let mut bad = fleet.fields.clone();
        bad.keep_weekly = 600;
        assert_eq!(check_fields(&bad).unwrap_err().field, "keep_weekly");
    }

    #[test]
    fn the_pass_keeps_the_tiers_of_the_schedule_that_applies_to_the_node() {
        let mut fleet = fleet();
        fleet.fields.keep_daily = 7;
        fleet.fields.keep_weekly = 4;
        fleet.fields.keep_monthly = 12;
        let following = effective(&fleet, &Stored::Fleet);
        assert_eq!(
            tiers(&following.fields),
            Tiers {
                daily: 7,
                weekly: 4,
                monthly: 12
            }
        );
        let mut own = body("own");
        own.keep_monthly = Some(3);
        let stored = decide(&own, &fleet).unwrap();
        fleet.fields.keep_daily = 0;
        assert_eq!(
            tiers(&effective(&fleet, &stored).fields),
            Tiers {
                daily: 7,
                weekly: 4,
                monthly: 3
            },
            "its own schedule's tiers, frozen when it was set"
        );
    }

    #[test]
    fn bk_18_verify_every_zero_days_is_a_stored_never() {
        let mut own = body("own");
        own.verify_every_days = Some(0);
        let Stored::Own(fields) = decide(&own, &fleet()).unwrap() else {
            panic!("own")
        };
        assert_eq!(fields.verify_every_days, 0);
    }
}
