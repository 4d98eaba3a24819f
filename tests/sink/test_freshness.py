"""The freshness window of the sink's metrics (spark_sink/metrics.py): weighted quantiles of the
ages at which rows became visible, over the batches of the last window only."""

from spark_sink.metrics import Freshness, weighted_quantiles


def test_weighted_quantiles_take_the_smallest_value_reaching_each_share_of_the_weight():
    assert weighted_quantiles([(3.0, 1), (1.0, 1), (2.0, 1), (4.0, 1)], (0.5, 0.99)) == {0.5: 2.0, 0.99: 4.0}
    assert weighted_quantiles([(1.0, 98), (50.0, 2)], (0.5, 0.99)) == {0.5: 1.0, 0.99: 50.0}
    assert weighted_quantiles([(7.0, 0.5)], (0.5, 0.99)) == {0.5: 7.0, 0.99: 7.0}


def test_a_tables_ages_are_visible_time_minus_commit_time_and_leave_with_their_batch():
    now = [1000.0]
    freshness = Freshness(window_s=60, clock=lambda: now[0])
    freshness.batch_visible("q", 1000.0, {"db.a": [(998_000, 1), (999_500, 1)], "db.b": []})
    now[0] = 1030.0
    freshness.batch_visible("q", 1030.0, {"db.a": [(1_029_000, 2)]})
    assert freshness.quantiles() == {("q", "db.a"): {0.5: 1.0, 0.99: 2.0}}  # db.b had no changes: no series
    now[0] = 1061.0  # the first batch is out of the window
    assert freshness.quantiles() == {("q", "db.a"): {0.5: 1.0, 0.99: 1.0}}
    now[0] = 1091.0
    assert freshness.quantiles() == {}
