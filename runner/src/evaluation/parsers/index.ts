// Readers for what gates and metric commands leave behind (DESIGN §13): test reports, METRIC lines, coverage.
export { parseJUnit } from "./junit.js";
export { parseLcov, type CoverageCount, type LcovReport } from "./lcov.js";
export { parseMetrics, type MetricError, type MetricReadout } from "./metric.js";
export { ParseError } from "./parse-error.js";
export { parseTap } from "./tap.js";
export { buildTestReport, type TestOutcome, type TestReport } from "./test-report.js";
