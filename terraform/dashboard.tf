# A Cloud Monitoring dashboard of the toolkit: the log-based metrics of monitoring.tf (they work
# with no further setting), Pub/Sub's own backlog metrics, and - when entry points export them
# (PUBSUB_TOOLKIT_METRICS_EXPORTER=cloud-monitoring, pubsub_toolkit.metrics) - the OpenTelemetry metrics under
# workload.googleapis.com/pubsub_toolkit.* (their charts stay empty until then).

locals {
  otel_metric = "workload.googleapis.com/pubsub_toolkit"

  # One chart per entry: title, filter, aligner, reducer, grouped by, plot type.
  dashboard_charts = [
    {
      title   = "Dead letters by reason (log-based)"
      filter  = "metric.type=\"logging.googleapis.com/user/${google_logging_metric.this["dead_lettered"].name}\" AND ${local.metric_resource_types}"
      aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = ["metric.label.reason"], plot = "STACKED_BAR"
    },
    {
      title   = "Dedup key reused with different content (log-based)"
      filter  = "metric.type=\"logging.googleapis.com/user/${google_logging_metric.this["fingerprint_mismatch"].name}\" AND ${local.metric_resource_types}"
      aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = ["metric.label.consumer"], plot = "STACKED_BAR"
    },
    {
      title   = "FIFO gap timeouts (log-based)"
      filter  = "metric.type=\"logging.googleapis.com/user/${google_logging_metric.this["fifo_gap_timeout"].name}\" AND ${local.metric_resource_types}"
      aligner = "ALIGN_SUM", reducer = "REDUCE_SUM", group_by = ["metric.label.consumer"], plot = "STACKED_BAR"
    },
    {
      title   = "Dead-letter backlog"
      filter  = "metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.type=\"pubsub_subscription\" AND resource.label.subscription_id=\"${google_pubsub_subscription.dead_letter.name}\""
      aligner = "ALIGN_MAX", reducer = "REDUCE_MAX", group_by = [], plot = "LINE"
    },
    {
      title   = "Duplicates dropped (OpenTelemetry)"
      filter  = "metric.type=\"${local.otel_metric}.duplicates\""
      aligner = "ALIGN_RATE", reducer = "REDUCE_SUM", group_by = ["metric.label.component"], plot = "STACKED_BAR"
    },
    {
      title   = "Dead letters by reason (OpenTelemetry)"
      filter  = "metric.type=\"${local.otel_metric}.dead_letters\""
      aligner = "ALIGN_RATE", reducer = "REDUCE_SUM", group_by = ["metric.label.reason"], plot = "STACKED_BAR"
    },
    {
      title   = "Dedup mismatches (OpenTelemetry)"
      filter  = "metric.type=\"${local.otel_metric}.mismatches\""
      aligner = "ALIGN_RATE", reducer = "REDUCE_SUM", group_by = [], plot = "LINE"
    },
    {
      title   = "Parked FIFO messages (OpenTelemetry)"
      filter  = "metric.type=\"${local.otel_metric}.fifo.parked\""
      aligner = "ALIGN_MAX", reducer = "REDUCE_MAX", group_by = ["metric.label.consumer"], plot = "LINE"
    },
    {
      title   = "Oldest FIFO gap age, s (OpenTelemetry)"
      filter  = "metric.type=\"${local.otel_metric}.fifo.oldest_gap_age\""
      aligner = "ALIGN_MAX", reducer = "REDUCE_MAX", group_by = ["metric.label.consumer"], plot = "LINE"
    },
    {
      title   = "Delay lateness p99, s (OpenTelemetry)"
      filter  = "metric.type=\"${local.otel_metric}.delay.lateness\""
      aligner = "ALIGN_DELTA", reducer = "REDUCE_PERCENTILE_99", group_by = [], plot = "LINE"
    },
    {
      title   = "Delay lateness p50, s (OpenTelemetry)"
      filter  = "metric.type=\"${local.otel_metric}.delay.lateness\""
      aligner = "ALIGN_DELTA", reducer = "REDUCE_PERCENTILE_50", group_by = [], plot = "LINE"
    },
    {
      title   = "Handler duration p99, s (OpenTelemetry)"
      filter  = "metric.type=\"${local.otel_metric}.handler.duration\""
      aligner = "ALIGN_DELTA", reducer = "REDUCE_PERCENTILE_99", group_by = ["metric.label.component"], plot = "LINE"
    },
  ]

  # The API drops zero values and empty ones (a tile at x 0 or y 0, an empty label value, an
  # empty list) and the provider compares what it reads back with what was sent (provider issues
  # 7242 and 16173, unfixed): anything it drops would show as a change on every plan, so none of
  # it is sent. Dashboard labels are the resources' labels, minus empty values.
  dashboard_labels = { for k, v in var.labels : k => v if v != "" }

  # Two charts a row, each 6 of the mosaic's 12 columns wide and 4 rows high.
  dashboard = merge(
    { displayName = local.alert_prefix },
    length(local.dashboard_labels) == 0 ? {} : { labels = local.dashboard_labels },
    {
      mosaicLayout = {
        columns = 12
        tiles = [
          for i, chart in local.dashboard_charts : merge(
            i % 2 == 0 ? {} : { xPos = (i % 2) * 6 },
            i < 2 ? {} : { yPos = floor(i / 2) * 4 },
            {
              width  = 6
              height = 4
              widget = {
                title = chart.title
                xyChart = {
                  chartOptions = { mode = "COLOR" }
                  dataSets = [{
                    plotType = chart.plot
                    timeSeriesQuery = {
                      timeSeriesFilter = {
                        filter = chart.filter
                        aggregation = merge(
                          {
                            alignmentPeriod    = "60s"
                            perSeriesAligner   = chart.aligner
                            crossSeriesReducer = chart.reducer
                          },
                          length(chart.group_by) == 0 ? {} : { groupByFields = chart.group_by },
                        )
                      }
                    }
                  }]
                }
              }
            },
          )
        ]
      }
    },
  )
}

resource "google_monitoring_dashboard" "this" {
  count = var.create_dashboard ? 1 : 0

  project        = var.project_id
  dashboard_json = jsonencode(local.dashboard)

  depends_on = [google_project_service.this, google_logging_metric.this]
}
