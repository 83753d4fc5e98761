/* The lab's plot: an SVG of horizontal bars, one panel per figure.
 *
 * Owns: the panels collected during a run and the SVG written at the end
 * (the height is known only then). Each bar is a median over rounds with a
 * min-max whisker, on a log scale per panel, because the figures span
 * orders of magnitude (4 ns beside 1 ms). A value of 0, which a log scale
 * cannot place, is written as "0" with no bar. No dependencies; one thread. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab.h"

#define PLOT_PANELS 32 /* far above turns' 6 figures + pump's rows */
#define PLOT_BARS   20 /* rows of the widest figure (turns: MAX_ROWS) */
#define PLOT_TEXT   96

/* Geometry, px. */
#define WIDTH     960
#define LABEL_W   330 /* the implementation's name */
#define VALUE_W   110 /* the median printed after the bar */
#define BAR_H     16
#define BAR_GAP   6
#define TITLE_H   26
#define AXIS_H    18
#define PANEL_GAP 18
#define PLOT_X0   (LABEL_W + 10)
#define PLOT_W    (WIDTH - PLOT_X0 - VALUE_W)

typedef struct bar {
    char label[PLOT_TEXT];
    double median, min, max;
    bool highlight; /* lull's own row */
} bar;

typedef struct panel {
    char title[PLOT_TEXT * 2];
    char unit[PLOT_TEXT];
    bar bars[PLOT_BARS];
    int nbars;
} panel;

struct lab_plot {
    char *path;
    panel panels[PLOT_PANELS];
    int npanels;
};

lab_plot *lab_plot_open(const char *path) {
    lab_plot *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->path = strdup(path);
    if (!p->path) {
        free(p);
        return NULL;
    }
    return p;
}

void lab_plot_panel(lab_plot *p, const char *title, const char *unit) {
    if (!p || p->npanels == PLOT_PANELS) return;
    panel *pn = &p->panels[p->npanels++];
    memset(pn, 0, sizeof *pn);
    snprintf(pn->title, sizeof pn->title, "%s", title);
    snprintf(pn->unit, sizeof pn->unit, "%s", unit);
}

void lab_plot_bar(lab_plot *p, const char *label, const lab_series *s,
                  bool highlight) {
    if (!p || !p->npanels || !s || s->n == 0) return;
    panel *pn = &p->panels[p->npanels - 1];
    if (pn->nbars == PLOT_BARS) return;
    bar *b = &pn->bars[pn->nbars++];
    snprintf(b->label, sizeof b->label, "%s", label);
    b->median = lab_series_median(s);
    b->min = lab_series_min(s);
    b->max = lab_series_max(s);
    b->highlight = highlight;
}

/* Characters SVG text must not carry raw. */
static void put_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

/* The panel's decades: [10^lo, 10^hi] covers every positive value. */
static void decades(const panel *pn, int *lo, int *hi) {
    double small = INFINITY, large = 0;
    for (int i = 0; i < pn->nbars; i++) {
        const bar *b = &pn->bars[i];
        double vals[3] = {b->min, b->median, b->max};
        for (int k = 0; k < 3; k++) {
            if (vals[k] > 0 && vals[k] < small) small = vals[k];
            if (vals[k] > large) large = vals[k];
        }
    }
    if (!(large > 0)) {
        *lo = 0;
        *hi = 1;
        return;
    }
    *lo = (int)floor(log10(small));
    *hi = (int)ceil(log10(large));
    if (*hi <= *lo) *hi = *lo + 1;
}

static double x_of(double v, int lo, int hi) {
    double t = (log10(v) - lo) / (double)(hi - lo);
    if (t < 0) t = 0;
    if (t > 1) t = 1;
    return PLOT_X0 + t * PLOT_W;
}

static int panel_height(const panel *pn) {
    return TITLE_H + pn->nbars * (BAR_H + BAR_GAP) + AXIS_H + PANEL_GAP;
}

static void write_panel(FILE *f, const panel *pn, int y) {
    int lo, hi;
    decades(pn, &lo, &hi);
    fprintf(f, "<text x=\"10\" y=\"%d\" class=\"title\">", y + 16);
    put_text(f, pn->title);
    fputs(" <tspan class=\"unit\">(", f);
    put_text(f, pn->unit);
    fputs(", log scale)</tspan></text>\n", f);
    int top = y + TITLE_H;
    int bottom = top + pn->nbars * (BAR_H + BAR_GAP);
    for (int d = lo; d <= hi; d++) {
        double x = x_of(pow(10, d), lo, hi);
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
                "class=\"grid\"/>\n",
                x, top - 2, x, bottom);
        char tick[32];
        snprintf(tick, sizeof tick, "%g", pow(10, d));
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\">%s</text>\n", x,
                bottom + 13, tick);
    }
    for (int i = 0; i < pn->nbars; i++) {
        const bar *b = &pn->bars[i];
        int by = top + i * (BAR_H + BAR_GAP);
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"label%s\">", LABEL_W,
                by + 12, b->highlight ? " lull" : "");
        put_text(f, b->label);
        fputs("</text>\n", f);
        char value[32];
        lab_format_value(value, sizeof value, b->median);
        if (!(b->median > 0)) {
            fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"value\">%s</text>\n",
                    PLOT_X0 + 4, by + 12, value);
            continue;
        }
        double x = x_of(b->median, lo, hi);
        fprintf(f,
                "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
                "class=\"%s\"/>\n",
                PLOT_X0, by, x - PLOT_X0, BAR_H,
                b->highlight ? "lull" : "peer");
        if (b->min > 0 && b->max > 0)
            fprintf(f,
                    "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
                    "class=\"whisker\"/>\n",
                    x_of(b->min, lo, hi), by + BAR_H / 2, x_of(b->max, lo, hi),
                    by + BAR_H / 2);
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"value\">%s</text>\n",
                PLOT_X0 + PLOT_W + 6, by + 12, value);
    }
}

int lab_plot_close(lab_plot *p) {
    if (!p) return 0;
    int rc = 0;
    FILE *f = fopen(p->path, "w");
    if (!f) {
        rc = -errno;
    } else {
        int height = 20;
        for (int i = 0; i < p->npanels; i++)
            height += panel_height(&p->panels[i]);
        fprintf(f,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
                "height=\"%d\" viewBox=\"0 0 %d %d\">\n",
                WIDTH, height, WIDTH, height);
        fputs("<style>text{font:12px sans-serif;fill:#222}"
              ".title{font-weight:bold;font-size:13px}.unit{font-weight:"
              "normal;fill:#666}.label{text-anchor:end}.lull{fill:#1f6fb2;"
              "font-weight:bold}.peer{fill:#9aa5b1}.tick{font-size:10px;"
              "fill:#666;text-anchor:middle}.grid{stroke:#ddd}.whisker{stroke:"
              "#222;stroke-width:1.2}.value{font-size:11px}</style>\n"
              "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
              f);
        int y = 10;
        for (int i = 0; i < p->npanels; i++) {
            write_panel(f, &p->panels[i], y);
            y += panel_height(&p->panels[i]);
        }
        fputs("</svg>\n", f);
        if (fclose(f) != 0) rc = -errno;
    }
    free(p->path);
    free(p);
    return rc;
}
