//! Fixed-bucket histograms behind the `metrics` facade, and the recorder that sends
//! histograms here and counters and gauges to the Prometheus exporter.
//!
//! Why not the exporter's histograms: it queues every sample (about 16 bytes) until a scrape
//! or its upkeep drains the queue, so a node nobody scrapes grows without bound (issue 20:
//! 242 MB after 13 M requests). Here a sample is counted into one of a fixed set of buckets
//! when it is recorded: a series is its buckets, its sum and nothing else, whatever the
//! request rate and however long nobody scrapes. The number of series is bounded too
//! (`HISTOGRAM_SERIES_MAX`).
//!
//! This file must not read the library's state or decide which tags are shown: the scrape
//! passes that choice in ([`Histograms::render`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use idmint_core::limits::TAG_COUNT_MAX;
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Label, Metadata, Recorder, SharedString,
    Unit,
};
use metrics_exporter_prometheus::PrometheusRecorder;

/// Most histogram series kept: a refill latency series per tag (tags come and go over a
/// process's life, hence twice the tags one store holds) and the HTTP latency series per
/// route and method. Past it, a new series is counted in its name's overflow series, whose
/// every label reads [`OTHER_LABEL_VALUE`].
pub const HISTOGRAM_SERIES_MAX: usize = 2 * TAG_COUNT_MAX + 1_024;

/// The label value of series that sum several: the tags not shown one by one and the
/// overflow past `HISTOGRAM_SERIES_MAX`. Parentheses are not tag characters, so no tag can
/// take this name.
pub const OTHER_LABEL_VALUE: &str = "(other)";

/// Upper bounds of the buckets of every histogram (all are durations in seconds): 100 µs
/// to 10 s, and the `+Inf` bucket above.
pub const DURATION_BUCKETS_S: &[f64] =
    &[0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The recorder installed as the process's global one: histograms here, counters and
/// gauges to the exporter (whose registry keeps one number per series, bounded by labels).
pub(crate) struct SplitRecorder {
    /// Counters and gauges.
    pub(crate) prometheus: PrometheusRecorder,
    /// Histograms.
    pub(crate) histograms: Arc<Histograms>,
}

impl Recorder for SplitRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.prometheus.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.prometheus.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        let mut help = self.histograms.help.write().unwrap_or_else(PoisonError::into_inner);
        help.insert(key.as_str().to_string(), description.to_string());
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.prometheus.register_counter(key, metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.prometheus.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, _metadata: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.histograms.series(key))
    }
}

/// Every histogram series of the process, by name and labels.
#[derive(Debug)]
pub(crate) struct Histograms {
    series: RwLock<HashMap<Key, Arc<Buckets>>>,
    /// `HISTOGRAM_SERIES_MAX`, lower in tests.
    series_max: usize,
    help: RwLock<HashMap<String, String>>,
}

impl Default for Histograms {
    fn default() -> Histograms {
        Histograms {
            series: RwLock::default(),
            series_max: HISTOGRAM_SERIES_MAX,
            help: RwLock::default(),
        }
    }
}

impl Histograms {
    /// The buckets of `key`, made on first use; past `HISTOGRAM_SERIES_MAX`, those of the
    /// name's overflow series.
    fn series(&self, key: &Key) -> Arc<Buckets> {
        let found = self.series.read().unwrap_or_else(PoisonError::into_inner).get(key).cloned();
        if let Some(found) = found {
            return found;
        }
        let mut series = self.series.write().unwrap_or_else(PoisonError::into_inner);
        let key = if series.len() >= self.series_max && !series.contains_key(key) {
            let labels: Vec<Label> =
                key.labels().map(|l| Label::new(l.key().to_string(), OTHER_LABEL_VALUE)).collect();
            Key::from_parts(key.name().to_string(), labels)
        } else {
            key.clone()
        };
        Arc::clone(series.entry(key).or_insert_with(|| Arc::new(Buckets::new())))
    }

    /// Series kept (each a fixed set of buckets).
    #[cfg(test)]
    fn series_count(&self) -> usize {
        self.series.read().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Appends every histogram as Prometheus text. A series with a `tag` label that `shown`
    /// refuses (given the tag and the series' `source` label, if any) is summed into that
    /// name's `tag="(other)"` series of the same source, so the buckets of all series of a
    /// name still add up to every sample recorded.
    pub(crate) fn render(&self, out: &mut String, shown: &dyn Fn(&str, Option<&str>) -> bool) {
        let mut families: BTreeMap<String, BTreeMap<Vec<(String, String)>, Snapshot>> =
            BTreeMap::new();
        for (key, buckets) in self.series.read().unwrap_or_else(PoisonError::into_inner).iter() {
            let source = key.labels().find(|l| l.key() == "source").map(|l| l.value());
            let labels: Vec<(String, String)> = key
                .labels()
                .map(|l| {
                    let hidden = l.key() == "tag" && !shown(l.value(), source);
                    let value = if hidden { OTHER_LABEL_VALUE } else { l.value() };
                    (l.key().to_string(), value.to_string())
                })
                .collect();
            let family = families.entry(key.name().to_string()).or_default();
            family.entry(labels).or_default().add(&buckets.snapshot());
        }
        let help = self.help.read().unwrap_or_else(PoisonError::into_inner);
        for (name, series) in families {
            if let Some(help) = help.get(&name) {
                let _ = writeln!(out, "# HELP {name} {}", help.replace('\n', " "));
            }
            let _ = writeln!(out, "# TYPE {name} histogram");
            for (labels, snapshot) in series {
                snapshot.write(out, &name, &labels);
            }
            out.push('\n');
        }
    }
}

/// One histogram series: a count per bucket (the last is `+Inf`) and the sum of the samples.
///
/// The sum is kept in whole nanoseconds (every series holds durations in seconds), so a
/// sample adds to it with one `fetch_add`: a compare-and-swap loop on the `f64`'s bits
/// retried whenever two workers recorded at once, which on the per-request path they do.
/// A sum in nanoseconds overflows after 584 years of summed latency.
#[derive(Debug)]
struct Buckets {
    counts: [AtomicU64; DURATION_BUCKETS_S.len() + 1],
    sum_ns: AtomicU64,
}

impl Buckets {
    fn new() -> Buckets {
        Buckets { counts: std::array::from_fn(|_| AtomicU64::new(0)), sum_ns: AtomicU64::new(0) }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            sum: self.sum_ns.load(Ordering::Relaxed) as f64 / NANOS_PER_SECOND,
        }
    }
}

impl HistogramFn for Buckets {
    fn record(&self, value: f64) {
        // A sample that is not a number has no bucket; it is not counted at all.
        if value.is_nan() {
            return;
        }
        // The first bound at or above the value (`le` is inclusive), or `+Inf`.
        let bucket = DURATION_BUCKETS_S.partition_point(|bound| *bound < value);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        // A negative sample adds nothing (`as` saturates at 0), a huge one at most `u64::MAX`.
        self.sum_ns.fetch_add((value * NANOS_PER_SECOND).round() as u64, Ordering::Relaxed);
    }
}

/// Nanoseconds in a second: [`Buckets`] sums in nanoseconds, the exposition in seconds.
const NANOS_PER_SECOND: f64 = 1e9;

/// A histogram series read at one moment, or several summed.
#[derive(Debug, Default)]
struct Snapshot {
    counts: [u64; DURATION_BUCKETS_S.len() + 1],
    sum: f64,
}

impl Snapshot {
    fn add(&mut self, other: &Snapshot) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine += theirs;
        }
        self.sum += other.sum;
    }

    /// The `_bucket` lines (cumulative, `+Inf` last), `_sum` and `_count`.
    fn write(&self, out: &mut String, name: &str, labels: &[(String, String)]) {
        let labels = label_text(labels);
        let comma = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0u64;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count;
            let le = DURATION_BUCKETS_S.get(i).map_or_else(|| "+Inf".to_string(), f64::to_string);
            let _ = writeln!(out, "{name}_bucket{{{labels}{comma}le=\"{le}\"}} {cumulative}");
        }
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {}", number(self.sum));
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

/// `k="v",…` with the values escaped as the text format requires.
pub(crate) fn label_text(labels: &[(String, String)]) -> String {
    let mut text = String::new();
    for (i, (key, value)) in labels.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        let _ = write!(text, "{key}=\"");
        for ch in value.chars() {
            match ch {
                '\\' => text.push_str("\\\\"),
                '"' => text.push_str("\\\""),
                '\n' => text.push_str("\\n"),
                ch => text.push(ch),
            }
        }
        text.push('"');
    }
    text
}

/// A sample value as the text format writes it (`+Inf`, `-Inf`, `NaN`, or the number).
pub(crate) fn number(value: f64) -> String {
    if value == f64::INFINITY {
        "+Inf".to_string()
    } else if value == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_their_bucket_and_hidden_tags_sum_into_other() {
        let histograms = Histograms::default();
        let key =
            |tag: &str| Key::from_parts("t_seconds", vec![Label::new("tag", tag.to_string())]);
        let shown = histograms.series(&key("shown"));
        shown.record(0.0001);
        shown.record(0.0002);
        shown.record(100.0);
        histograms.series(&key("a")).record(0.3);
        histograms.series(&key("b")).record(0.3);
        let mut out = String::new();
        histograms.render(&mut out, &|tag, _| tag == "shown");
        assert!(out.contains("t_seconds_bucket{tag=\"shown\",le=\"0.0001\"} 1\n"), "{out}");
        assert!(out.contains("t_seconds_bucket{tag=\"shown\",le=\"0.0005\"} 2\n"), "{out}");
        assert!(out.contains("t_seconds_bucket{tag=\"shown\",le=\"10\"} 2\n"), "{out}");
        assert!(out.contains("t_seconds_bucket{tag=\"shown\",le=\"+Inf\"} 3\n"), "{out}");
        // The sums, to the nanosecond (kept in nanoseconds).
        assert!(out.contains("t_seconds_sum{tag=\"shown\"} 100.0003\n"), "{out}");
        assert!(out.contains("t_seconds_sum{tag=\"(other)\"} 0.6\n"), "{out}");
        assert!(out.contains("t_seconds_count{tag=\"(other)\"} 2\n"), "{out}");
        assert!(out.contains("t_seconds_bucket{tag=\"(other)\",le=\"0.25\"} 0\n"), "{out}");
        assert!(out.contains("t_seconds_bucket{tag=\"(other)\",le=\"0.5\"} 2\n"), "{out}");
        assert!(!out.contains("tag=\"a\""), "{out}");
    }

    #[test]
    fn series_past_the_bound_share_an_overflow_series() {
        let histograms = Histograms { series_max: 50, ..Histograms::default() };
        for i in 0..60 {
            let key = Key::from_parts("t_seconds", vec![Label::new("tag", format!("t{i}"))]);
            histograms.series(&key).record(1.0);
        }
        assert_eq!(histograms.series_count(), 51);
        let mut out = String::new();
        histograms.render(&mut out, &|_, _| true);
        assert!(out.contains("t_seconds_count{tag=\"(other)\"} 10\n"), "{out}");
    }

    #[test]
    fn label_values_are_escaped() {
        let labels = vec![("a".to_string(), "q\"b\\n\nx".to_string())];
        assert_eq!(label_text(&labels), "a=\"q\\\"b\\\\n\\nx\"");
        assert_eq!(number(f64::INFINITY), "+Inf");
    }
}
