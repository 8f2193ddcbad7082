//! `--plot FILE.svg`: the series a bench prints, as a line chart (plotters, SVG backend).
//!
//! A [`Chart`] is one or more panels stacked vertically that share the x axis (e.g. Okapi's
//! Fig. 13: throughput on top, p99 latency below); each panel has named series of (x, y)
//! points, drawn as lines over a numeric x axis or as grouped bars over named categories
//! (`weft bench ec`: one group per op, one bar per implementation). Axes are labelled with
//! their units by the caller.
//!
//! Invariants: the file is written whole or not at all (rendered to memory, then written
//! to a temporary file that is renamed over `path`); points that are not finite are dropped;
//! an empty chart is an error, not an empty picture.

use std::path::Path;

use plotters::prelude::*;

use crate::{cli_error, CliError};

/// One panel: a y axis and its series.
pub struct Panel {
    pub y_label: String,
    /// (name, points) in drawing order.
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Panels sharing an x axis.
pub struct Chart {
    pub title: String,
    pub x_label: String,
    /// A log2 x axis (read sizes, load levels doubling).
    pub x_log: bool,
    /// Categories of a bar chart: when not empty, x values are indices into it and each
    /// series is drawn as bars side by side within a category.
    pub x_names: Vec<String>,
    pub panels: Vec<Panel>,
}

/// Distinct colours for up to eight series, then repeating.
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

impl Panel {
    /// A panel with series grouped by name from (name, x, y) triples, in first-seen order.
    pub fn from_points(
        y_label: &str,
        points: impl IntoIterator<Item = (String, f64, f64)>,
    ) -> Panel {
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for (name, x, y) in points {
            match series.iter_mut().find(|(n, _)| *n == name) {
                Some((_, list)) => list.push((x, y)),
                None => series.push((name, vec![(x, y)])),
            }
        }
        for (_, list) in &mut series {
            list.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Panel { y_label: y_label.to_string(), series }
    }
}

impl Chart {
    /// A bar chart of `rows`: one category per distinct `category(row)` (first-seen order),
    /// one bar per distinct `series(row)` within it, of height `value(row)`.
    pub fn bars(
        title: &str,
        x_label: &str,
        y_label: &str,
        rows: &[serde_json::Value],
        category: impl Fn(&serde_json::Value) -> String,
        series: impl Fn(&serde_json::Value) -> String,
        value: impl Fn(&serde_json::Value) -> f64,
    ) -> Chart {
        let mut names: Vec<String> = Vec::new();
        let mut points = Vec::new();
        for row in rows {
            let name = category(row);
            let at = match names.iter().position(|n| *n == name) {
                Some(at) => at,
                None => {
                    names.push(name);
                    names.len() - 1
                }
            };
            points.push((series(row), at as f64, value(row)));
        }
        Chart {
            title: title.to_string(),
            x_label: x_label.to_string(),
            x_log: false,
            x_names: names,
            panels: vec![Panel::from_points(y_label, points)],
        }
    }

    /// Renders the chart as SVG text.
    pub fn render(&self) -> Result<String, CliError> {
        let finite =
            |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!self.x_log || x > 0.0);
        let all: Vec<(f64, f64)> = self
            .panels
            .iter()
            .flat_map(|p| p.series.iter().flat_map(|(_, s)| s.iter().copied()))
            .filter(finite)
            .collect();
        if all.is_empty() {
            return Err(cli_error!("--plot: nothing to draw"));
        }
        let (mut x_min, mut x_max) =
            all.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
        if self.x_log {
            (x_min, x_max) = (x_min.log2(), x_max.log2());
        }
        let bars = !self.x_names.is_empty();
        let (x_lo, x_hi) = if bars {
            (-0.6, self.x_names.len() as f64 - 0.4)
        } else {
            let pad = ((x_max - x_min) * 0.05).max(0.5);
            (x_min - pad, x_max + pad)
        };
        let height = 60 + 320 * self.panels.len() as u32;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (860, height)).into_drawing_area();
            let fail = |e: &dyn std::fmt::Display| cli_error!("--plot: drawing failed: {e}");
            root.fill(&WHITE).map_err(|e| fail(&e))?;
            let root = root.titled(&self.title, ("sans-serif", 20)).map_err(|e| fail(&e))?;
            let areas = root.split_evenly((self.panels.len(), 1));
            for (panel, area) in self.panels.iter().zip(areas) {
                let y_max = panel
                    .series
                    .iter()
                    .flat_map(|(_, s)| s.iter().filter(|p| finite(p)).map(|p| p.1))
                    .fold(0.0f64, f64::max);
                // Headroom above the data for the legend box (a row per series), so it
                // hides no point.
                let headroom = (1.1 + 0.07 * panel.series.len() as f64).min(1.6);
                let y_hi = if y_max > 0.0 { y_max * headroom } else { 1.0 };
                let mut chart = ChartBuilder::on(&area)
                    .margin(12)
                    .x_label_area_size(40)
                    .y_label_area_size(70)
                    .build_cartesian_2d(x_lo..x_hi, 0.0..y_hi)
                    .map_err(|e| fail(&e))?;
                let x_log = self.x_log;
                let names = &self.x_names;
                let x_format = move |x: &f64| {
                    if !names.is_empty() {
                        let i = x.round();
                        return match names.get(i as usize) {
                            Some(name) if (x - i).abs() < 0.05 && i >= 0.0 => name.clone(),
                            _ => String::new(),
                        };
                    }
                    // A log axis is labelled at powers of two only (its mesh lines fall
                    // between them too).
                    if x_log && (x - x.round()).abs() > 1e-6 {
                        return String::new();
                    }
                    let value = if x_log { x.exp2() } else { *x };
                    if (value - value.round()).abs() < 1e-9 {
                        format!("{}", value.round())
                    } else {
                        format!("{value:.2}")
                    }
                };
                let mut mesh = chart.configure_mesh();
                if bars {
                    mesh.disable_x_mesh().x_labels(self.x_names.len() * 20 + 1);
                } else if x_log {
                    // Ticks every quarter of a doubling: every power of two is one.
                    mesh.x_labels(((x_hi - x_lo) * 4.0).ceil() as usize + 1);
                }
                mesh.x_desc(if self.x_log {
                    format!("{} (log scale)", self.x_label)
                } else {
                    self.x_label.clone()
                })
                .y_desc(&panel.y_label)
                .x_label_formatter(&x_format)
                .draw()
                .map_err(|e| fail(&e))?;
                let count = panel.series.len().max(1) as f64;
                for (i, (name, points)) in panel.series.iter().enumerate() {
                    let colour = COLOURS[i % COLOURS.len()];
                    if bars {
                        let width = 0.8 / count;
                        let left = |x: f64| x - 0.4 + i as f64 * width;
                        chart
                            .draw_series(points.iter().filter(|p| finite(p)).map(|&(x, y)| {
                                Rectangle::new(
                                    [(left(x), 0.0), (left(x) + width, y)],
                                    colour.filled(),
                                )
                            }))
                            .map_err(|e| fail(&e))?
                            .label(name.as_str())
                            .legend(move |(x, y)| {
                                Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
                            });
                        continue;
                    }
                    let points: Vec<(f64, f64)> = points
                        .iter()
                        .filter(|p| finite(p))
                        .map(|&(x, y)| (if x_log { x.log2() } else { x }, y))
                        .collect();
                    chart
                        .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))
                        .map_err(|e| fail(&e))?
                        .label(name.as_str())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
                        });
                    chart
                        .draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))
                        .map_err(|e| fail(&e))?;
                }
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .border_style(BLACK)
                    .background_style(WHITE.mix(0.85))
                    .draw()
                    .map_err(|e| fail(&e))?;
            }
            root.present().map_err(|e| fail(&e))?;
        }
        Ok(svg)
    }

    /// Renders and writes the chart to `path` (whole or not at all).
    pub fn write(&self, path: &Path) -> Result<(), CliError> {
        let svg = self.render()?;
        let partial = path.with_extension("svg.partial");
        std::fs::write(&partial, svg)
            .and_then(|()| std::fs::rename(&partial, path))
            .map_err(|e| cli_error!("--plot: cannot write {}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_names_its_axes_and_series_and_draws_every_point() {
        let throughput = Panel::from_points(
            "throughput (MB/s)",
            [
                ("w=2", 12.0, 300.0),
                ("w=6", 12.0, 200.0),
                ("w=2", 2.0, 100.0),
                ("w=6", 2.0, f64::NAN),
            ]
            .map(|(n, x, y)| (n.to_string(), x, y)),
        );
        assert_eq!(throughput.series[0].1, vec![(2.0, 100.0), (12.0, 300.0)], "sorted by x");
        let chart = Chart {
            title: "reads".into(),
            x_label: "read size (MiB)".into(),
            x_log: true,
            x_names: Vec::new(),
            panels: vec![throughput],
        };
        let svg = chart.render().unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        for text in ["reads", "read size (MiB) (log scale)", "throughput (MB/s)", "w=2", "w=6"] {
            assert!(svg.contains(text), "{text} missing");
        }
        // Three finite points, one circle each.
        assert_eq!(svg.matches("<circle").count(), 3);
        // The log axis is labelled at powers of two (2, 4, 8), nothing in between.
        let texts: Vec<&str> = svg
            .split("</text>")
            .filter_map(|piece| piece.rsplit_once('>').map(|(_, text)| text.trim()))
            .filter(|text| text.starts_with(|c: char| c.is_ascii_digit()))
            .collect();
        let x_labels: Vec<&str> = texts.iter().copied().filter(|t| !t.contains('.')).collect();
        assert_eq!(x_labels, ["2", "4", "8", "16"], "{texts:?}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.svg");
        chart.write(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), svg);
    }

    #[test]
    fn a_bar_chart_draws_one_bar_per_point_and_names_its_categories() {
        let panel = Panel::from_points(
            "rate (GB/s)",
            [("weft", 0.0, 9.5), ("isal", 0.0, 7.0), ("weft", 1.0, 8.0), ("isal", 1.0, 6.5)]
                .map(|(n, x, y)| (n.to_string(), x, y)),
        );
        let chart = Chart {
            title: "weft bench ec".into(),
            x_label: "operation".into(),
            x_log: false,
            x_names: vec!["encode".into(), "decode".into()],
            panels: vec![panel],
        };
        let svg = chart.render().unwrap();
        for text in ["encode", "decode", "weft", "isal", "rate (GB/s)"] {
            assert!(svg.contains(text), "{text} missing");
        }
        // Four bars, two legend swatches, the background and the legend box.
        assert!(svg.matches("<rect").count() >= 6, "{svg}");
    }

    #[test]
    fn an_empty_chart_is_an_error() {
        let chart = Chart {
            title: "t".into(),
            x_label: "x".into(),
            x_log: false,
            x_names: Vec::new(),
            panels: vec![Panel::from_points("y", [("a".to_string(), f64::NAN, 1.0)])],
        };
        assert!(chart.render().unwrap_err().to_string().contains("nothing to draw"));
    }
}
