//! Small line charts as inline SVG, drawn on the server: no script, no library, nothing fetched
//! by the browser. One series per chart, the y axis from 0 to the series' maximum.

use std::fmt::Write;

/// Width and height of a chart's drawing area, in SVG units (the browser scales it).
const WIDTH: f64 = 300.0;
const HEIGHT: f64 = 60.0;

/// An SVG chart of `points` (x = seconds relative to now, ≤ 0; y ≥ 0), titled `title` (escaped
/// here). An empty or single-point series draws an empty frame that says so.
pub fn line_chart(title: &str, unit: &str, points: &[(f64, f64)], span_seconds: f64) -> String {
    let max = points.iter().map(|p| p.1).fold(0.0_f64, f64::max);
    let last = points.last().map_or(0.0, |p| p.1);
    let title = super::page::escape(title);
    let mut svg = String::with_capacity(256 + points.len() * 16);
    let _ = write!(
        svg,
        "<figure class=\"chart\"><figcaption>{title}: <b>{}</b> {unit} (max {})</figcaption>\
         <svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" aria-label=\"{title}\" \
         preserveAspectRatio=\"none\">\
         <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{HEIGHT}\" class=\"frame\"/>",
        format_rate(last),
        format_rate(max),
    );
    if points.len() >= 2 && span_seconds > 0.0 {
        let top = if max > 0.0 { max } else { 1.0 };
        svg.push_str("<polyline class=\"line\" points=\"");
        for (i, (x, y)) in points.iter().enumerate() {
            let px = WIDTH * (1.0 + (x / span_seconds).clamp(-1.0, 0.0));
            // A 2-unit margin so a flat line at the top or bottom stays visible.
            let py = HEIGHT - 2.0 - (HEIGHT - 4.0) * (y / top).clamp(0.0, 1.0);
            if i > 0 {
                svg.push(' ');
            }
            let _ = write!(svg, "{px:.1},{py:.1}");
        }
        svg.push_str("\"/>");
    } else {
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"empty\">collecting samples…</text>",
            WIDTH / 2.0,
            HEIGHT / 2.0 + 4.0
        );
    }
    svg.push_str("</svg></figure>");
    svg
}

/// A rate with a precision that suits its size.
pub fn format_rate(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_polyline_inside_the_frame() {
        let svg = line_chart(
            "sends/s",
            "/s",
            &[(-60.0, 0.0), (-30.0, 10.0), (0.0, 5.0)],
            60.0,
        );
        assert!(svg.contains("<polyline"), "{svg}");
        assert!(svg.contains("0.0,58.0 150.0,2.0 300.0,30.0"), "{svg}");
        assert!(svg.contains("<b>5.00</b>"), "{svg}");
    }

    #[test]
    fn escapes_the_title_and_copes_with_no_data() {
        let svg = line_chart("<x>", "/s", &[], 60.0);
        assert!(svg.contains("&lt;x&gt;") && !svg.contains("<x>"), "{svg}");
        assert!(svg.contains("collecting samples"));
        // Nothing but zeros: a flat line at the bottom, no division by zero.
        let flat = line_chart("t", "/s", &[(-10.0, 0.0), (0.0, 0.0)], 60.0);
        assert!(flat.contains("250.0,58.0 300.0,58.0"), "{flat}");
    }
}
