import uPlot from 'uplot';
import { h } from './dom.ts';

/** Line colours, told apart by most colour-blind readers (Okabe and Ito's palette, then greys). */
export const CHART_COLORS = [
  '#0072b2',
  '#e69f00',
  '#009e73',
  '#d55e00',
  '#cc79a7',
  '#56b4e9',
  '#f0e442',
  '#000000',
];

export interface ChartLine {
  label: string;
  /** Aligned with the chart's times; null is a gap (no sample in that bucket). */
  values: (number | null)[];
}

export interface ChartSpec {
  /** Names the chart in the page (data-chart), e.g. gpu-utilization. */
  name: string;
  title: string;
  /** Epoch milliseconds, oldest first. */
  times: number[];
  lines: ChartLine[];
  /** How an axis tick or a legend value reads: "42 %", "1.5 GiB". */
  format: (value: number) => string;
  /** Fixed lower and upper bounds (e.g. 0..100 for percentages); otherwise from the data. */
  range?: [number, number];
}

const HEIGHT = 180;

/**
 * A time-series line chart drawn by uPlot on a canvas. After every draw the figure's element carries
 * what was drawn and where (data-x-min/max, data-y-min/max, data-plot: the plotting area in CSS pixels
 * of the canvas) and the lines' values (data-lines), so a reader or a test can tell a drawn point's
 * position from its value. `destroy` releases the plot.
 */
export class LineChart {
  readonly element: HTMLElement;
  readonly #plot: uPlot | null = null;

  constructor(spec: ChartSpec, width: number) {
    const body = h('div', { class: 'chart-body' });
    this.element = h(
      'figure',
      {
        class: 'chart',
        attrs: {
          'data-chart': spec.name,
          'data-lines': JSON.stringify({
            times: spec.times,
            labels: spec.lines.map((line) => line.label),
            colors: spec.lines.map((_, i) => color(i)),
            values: spec.lines.map((line) => line.values),
          }),
        },
      },
      h('figcaption', null, spec.title),
      body,
    );
    const drawn = spec.lines.some((line) => line.values.some((v) => v !== null));
    if (!drawn) {
      body.append(
        h('p', { class: 'muted small', attrs: { 'data-empty': true } }, 'No samples in this window.'),
      );
      return;
    }
    const options: uPlot.Options = {
      width,
      height: HEIGHT,
      scales: {
        x: { time: true },
        y: spec.range ? { range: spec.range } : { range: (_u, min, max) => paddedRange(min, max) },
      },
      axes: [
        { stroke: '#555', grid: { stroke: '#eee' }, ticks: { stroke: '#ddd' } },
        {
          stroke: '#555',
          size: 70,
          grid: { stroke: '#eee' },
          ticks: { stroke: '#ddd' },
          values: (_u, splits) => splits.map((v) => spec.format(v)),
        },
      ],
      series: [
        {},
        ...spec.lines.map((line, i) => ({
          label: line.label,
          stroke: color(i),
          width: 2,
          points: { show: false },
          spanGaps: false,
          value: (_u: uPlot, v: number | null) => (v === null ? '—' : spec.format(v)),
        })),
      ],
      legend: { show: true },
      cursor: { drag: { x: false, y: false } },
      hooks: { draw: [(u) => this.#describe(u)] },
    };
    const data: uPlot.AlignedData = [
      spec.times.map((t) => t / 1000),
      ...spec.lines.map((line) => line.values),
    ];
    this.#plot = new uPlot(options, data, body);
  }

  /** Where the plotting area is and what its scales span, as data attributes of the figure. */
  #describe(u: uPlot): void {
    const ratio = uPlot.pxRatio;
    const { left, top, width, height } = u.bbox;
    const x = u.scales['x'];
    const y = u.scales['y'];
    this.element.dataset['plot'] = [left, top, width, height].map((n) => n / ratio).join(',');
    this.element.dataset['xMin'] = String((x?.min ?? 0) * 1000);
    this.element.dataset['xMax'] = String((x?.max ?? 0) * 1000);
    this.element.dataset['yMin'] = String(y?.min ?? 0);
    this.element.dataset['yMax'] = String(y?.max ?? 0);
    this.element.dataset['drawn'] = String(Number(this.element.dataset['drawn'] ?? '0') + 1);
  }

  destroy(): void {
    this.#plot?.destroy();
  }
}

function color(index: number): string {
  return CHART_COLORS[index % CHART_COLORS.length] ?? '#000000';
}

/** Some room above and below the data, and a flat line drawn mid-height rather than on an edge. */
function paddedRange(min: number | null, max: number | null): uPlot.Range.MinMax {
  const low = min ?? 0;
  const high = max ?? 1;
  if (high === low)
    return [low === 0 ? 0 : low - Math.abs(low) * 0.5, high === 0 ? 1 : high + Math.abs(high) * 0.5];
  const pad = (high - low) * 0.1;
  return [low >= 0 && low - pad < 0 ? 0 : low - pad, high + pad];
}
