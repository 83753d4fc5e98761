/* The lab's round statistics (lab/stats.c) that its verdict lines judge
 * by: percentiles, medians, ratios and counts taken round by round, and
 * the sign test the lateness notes print. */
#include "check.h"

#include <math.h>
#include <string.h>

#include "lab.h"

static lab_series series_of(const double *v, int n) {
    lab_series s = {.n = 0};
    for (int i = 0; i < n; i++)
        lab_series_add(&s, v[i]);
    return s;
}

static bool near(double x, double y) {
    return fabs(x - y) <= 1e-9 * (fabs(y) > 1 ? fabs(y) : 1);
}

TEST(percentile_interpolates_between_sorted_values) {
    double v[] = {40, 10, 30, 20};
    CHECK(near(lab_percentile(v, 4, 0.5), 25));
    CHECK(near(lab_percentile(v, 4, 0), 10));
    CHECK(near(lab_percentile(v, 4, 1), 40));
    CHECK(near(lab_percentile(v, 4, 0.99), 39.7));
    CHECK(v[0] == 10 && v[3] == 40); /* sorted in place */
}

/* p99 of 100 samples lies between the 99th and the 100th smallest; of one
 * sample, that sample. */
TEST(percentile_of_one_and_of_a_hundred_samples) {
    double one[] = {7};
    CHECK(lab_percentile(one, 1, 0.99) == 7);
    CHECK(lab_percentile(one, 1, 0.5) == 7);
    double v[100];
    for (int i = 0; i < 100; i++)
        v[i] = 100 - i; /* 100 .. 1, unsorted */
    CHECK(near(lab_percentile(v, 100, 0.99), 99.01));
    CHECK(near(lab_percentile(v, 100, 0.5), 50.5));
}

/* No samples, no figure: NaN (printed "-", never judged met), not a 0 a
 * wait or a wakeup count would read as a perfect result. */
TEST(statistics_of_no_samples_are_nan) {
    double v[1] = {5};
    CHECK(isnan(lab_percentile(v, 0, 0.5)));
    CHECK(isnan(lab_percentile(v, 0, 0.99)));
    lab_series none = {.n = 0};
    CHECK(isnan(lab_series_median(&none)));
    CHECK(isnan(lab_series_min(&none)));
    CHECK(isnan(lab_series_max(&none)));
    char buf[32];
    lab_format_value(buf, sizeof buf, lab_series_max(&none));
    CHECK(strcmp(buf, "-") == 0);
}

TEST(series_median_of_odd_and_even_rounds) {
    double odd[] = {5, 1, 3};
    double even[] = {4, 1, 3, 2};
    lab_series a = series_of(odd, 3), b = series_of(even, 4);
    CHECK(lab_series_median(&a) == 3);
    CHECK(near(lab_series_median(&b), 2.5));
    CHECK(a.v[0] == 5); /* the series itself is left in round order */
    CHECK(lab_series_min(&b) == 1 && lab_series_max(&b) == 4);
}

TEST(ratios_pair_rounds_and_skip_a_zero_denominator) {
    double a[] = {10, 20, 30, 40};
    double b[] = {5, 0, 15};
    lab_series x = series_of(a, 4), y = series_of(b, 3);
    lab_series r = lab_series_ratios(&x, &y);
    CHECK_EQ(r.n, 2); /* round 2's 0 left out; round 4 has no pair */
    CHECK(r.v[0] == 2 && r.v[1] == 2);
    lab_series none = {.n = 0};
    CHECK_EQ(lab_series_ratios(&x, &none).n, 0);
}

/* A row that missed a round (a failure, say) is paired by round, not by
 * place: its third value is round 4's, and meets the other row's round 4. */
TEST(ratios_and_below_pair_by_round_past_a_missed_one) {
    lab_series x = {.n = 0}, y = {.n = 0};
    double a[] = {10, 20, 30, 40};
    for (int r = 0; r < 4; r++)
        lab_series_add_round(&x, r, a[r]);
    lab_series_add_round(&y, 0, 5);
    lab_series_add_round(&y, 1, 10);
    lab_series_add_round(&y, 3, 20); /* round 2 missed */
    lab_series_add(&y, 100);         /* the next: round 4 */
    CHECK_EQ(y.round[3], 4);
    lab_series r = lab_series_ratios(&x, &y);
    CHECK_EQ(r.n, 3);
    CHECK(r.v[0] == 2 && r.v[1] == 2 && r.v[2] == 2);
    CHECK(r.round[2] == 3);
    int n = -1;
    CHECK_EQ(lab_series_below(&y, &x, &n), 3);
    CHECK_EQ(n, 3);
    /* A round given twice, or out of order, is refused. */
    lab_series_add_round(&y, 4, 1);
    lab_series_add_round(&y, 2, 1);
    CHECK_EQ(y.n, 4);
}

/* The median of the shared rounds' ratios; NaN when none is shared. */
TEST(ratio_median_of_shared_rounds_or_nan) {
    lab_series x = {.n = 0}, y = {.n = 0}, z = {.n = 0};
    double a[] = {10, 30, 90}, b[] = {5, 10, 30};
    for (int r = 0; r < 3; r++) {
        lab_series_add_round(&x, r, a[r]);
        lab_series_add_round(&y, r, b[r]);
    }
    CHECK(lab_series_ratio_median(&x, &y) == 3); /* 2, 3, 3 */
    lab_series_add_round(&z, 7, 1);
    CHECK(isnan(lab_series_ratio_median(&x, &z)));
}

TEST(below_counts_strictly_lower_rounds_of_the_shorter) {
    double a[] = {1, 5, 3, 3, 9};
    double b[] = {2, 4, 3, 4};
    lab_series x = series_of(a, 5), y = series_of(b, 4);
    int n = -1;
    CHECK_EQ(lab_series_below(&x, &y, &n), 2); /* rounds 1 and 4; 3 ties */
    CHECK_EQ(n, 4);
    CHECK_EQ(lab_series_below(&y, &x, &n), 1);
}

TEST(sign_test_matches_the_binomial_tails) {
    CHECK(near(lab_sign_test_p(1, 5), 12.0 / 32)); /* 2 × (1 + 5) / 2^5 */
    CHECK(near(lab_sign_test_p(4, 5), 12.0 / 32)); /* symmetric */
    CHECK(near(lab_sign_test_p(5, 5), 2.0 / 32));
    CHECK(near(lab_sign_test_p(0, 15), 2.0 / 32768));
    CHECK(near(lab_sign_test_p(3, 15), 2.0 * (1 + 15 + 105 + 455) / 32768));
    CHECK(lab_sign_test_p(7, 15) == 1); /* as even as 15 tosses can be */
    CHECK(lab_sign_test_p(5, 10) == 1);
}

TEST(sign_test_of_no_rounds_or_a_count_out_of_range_is_one) {
    CHECK(lab_sign_test_p(0, 0) == 1);
    CHECK(lab_sign_test_p(-1, 5) == 1);
    CHECK(lab_sign_test_p(6, 5) == 1);
}
