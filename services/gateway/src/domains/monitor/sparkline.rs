//! The node page's response-time sparkline: the last day of checks drawn as an inline SVG
//! path, no chart library. The day is cut into [`BUCKETS`] slices; each slice with answers is
//! a point at its slowest response (a spike is what a person looks for), a slice without any
//! breaks the line, and a slice with a failing check gets a mark on the baseline. However many
//! checks the day held, the drawing has at most [`BUCKETS`] points.

use capstan_events::monitor::rpc::HistoryPoint;
use chrono::{DateTime, Duration, Utc};
use std::fmt::Write;

/// Slices of the day (15 minutes each).
pub const BUCKETS: usize = 96;
/// The drawing's size, in SVG units.
pub const WIDTH: u32 = 288;
pub const HEIGHT: u32 = 40;

/// What the template draws.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sparkline {
    /// The SVG path of the response times (`M x y L x y ...`).
    pub path: String,
    /// The x of each slice with a failing check.
    pub failures: Vec<u32>,
    /// The slowest response of the day, for the label.
    pub max_ms: u32,
    /// How many checks the day held.
    pub checks: usize,
    pub failed: usize,
    pub width: u32,
    pub height: u32,
}

/// Draws `history` (oldest first) for the day before `now`; `None` when it is empty.
pub fn draw(history: &[HistoryPoint], now: DateTime<Utc>) -> Option<Sparkline> {
    let start = now - Duration::days(1);
    let slice = Duration::days(1).num_milliseconds() as f64 / BUCKETS as f64;
    let mut slowest: [Option<u32>; BUCKETS] = [None; BUCKETS];
    let mut failing = [false; BUCKETS];
    let mut checks = 0;
    let mut failed = 0;
    for point in history
        .iter()
        .filter(|point| point.at >= start && point.at <= now)
    {
        let offset = (point.at - start).num_milliseconds() as f64;
        let index = ((offset / slice) as usize).min(BUCKETS - 1);
        checks += 1;
        if !point.ok {
            failed += 1;
            failing[index] = true;
        }
        if let (true, Some(ms)) = (point.ok, point.response_ms) {
            slowest[index] = Some(slowest[index].map_or(ms, |kept: u32| kept.max(ms)));
        }
    }
    if checks == 0 {
        return None;
    }
    let max_ms = slowest.iter().flatten().copied().max().unwrap_or(0);
    let step = WIDTH as f64 / (BUCKETS - 1) as f64;
    let x_of = |index: usize| (index as f64 * step).round() as u32;
    let usable = f64::from(HEIGHT - 4);
    let mut path = String::new();
    let mut drawing = false;
    for (index, value) in slowest.iter().enumerate() {
        match value {
            Some(ms) => {
                let y = if max_ms == 0 {
                    HEIGHT - 2
                } else {
                    HEIGHT - 2 - (f64::from(*ms) / f64::from(max_ms) * usable).round() as u32
                };
                let _ = write!(
                    path,
                    "{}{} {} ",
                    if drawing { "L" } else { "M" },
                    x_of(index),
                    y
                );
                drawing = true;
            }
            None => drawing = false,
        }
    }
    Some(Sparkline {
        path: path.trim_end().to_string(),
        failures: failing
            .iter()
            .enumerate()
            .filter(|(_, failed)| **failed)
            .map(|(index, _)| x_of(index))
            .collect(),
        max_ms,
        checks,
        failed,
        width: WIDTH,
        height: HEIGHT,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(now: DateTime<Utc>, minutes_ago: i64, ok: bool, ms: u32) -> HistoryPoint {
        HistoryPoint {
            at: now - Duration::minutes(minutes_ago),
            ok,
            response_ms: Some(ms),
        }
    }

    #[test]
    fn an_empty_day_draws_nothing() {
        assert_eq!(draw(&[], Utc::now()), None);
    }

    #[test]
    fn the_slowest_answer_of_each_slice_is_drawn_and_failures_are_marked() {
        let now = Utc::now();
        let history = [
            point(now, 1439, true, 100),
            point(now, 1438, true, 300),
            point(now, 5, false, 10_000),
            point(now, 1, true, 50),
        ];
        let drawn = draw(&history, now).unwrap();
        assert_eq!(drawn.checks, 4);
        assert_eq!(drawn.failed, 1);
        // a failing check's time is not a response time
        assert_eq!(drawn.max_ms, 300);
        // two points (the first slice's slowest at the top, the last slice's) and a gap between
        assert_eq!(drawn.path, "M0 2 M288 32");
        assert_eq!(drawn.failures, [288]);
    }

    #[test]
    fn a_day_of_checks_every_second_is_still_at_most_96_points() {
        let now = Utc::now();
        let history: Vec<HistoryPoint> = (0..86_400)
            .map(|second| HistoryPoint {
                at: now - Duration::seconds(86_399 - second),
                ok: true,
                response_ms: Some((second % 500) as u32),
            })
            .collect();
        let drawn = draw(&history, now).unwrap();
        assert_eq!(drawn.path.matches(['M', 'L']).count(), BUCKETS);
        assert!(drawn.path.len() < 2_000, "{}", drawn.path.len());
    }

    #[test]
    fn checks_older_than_a_day_are_left_out() {
        let now = Utc::now();
        assert_eq!(draw(&[point(now, 1441, true, 10)], now), None);
    }
}
