#!/usr/bin/env python3
"""Spark ML's ALS on the ratings files of scripts/bench-mfsgd.sh, a peer of `harp mfsgd`.

  bench_mfsgd_spark.py TRAIN TEST RANK REGPARAM ITERS THREADS

ITERS is a comma-separated list of iteration counts (e.g. 1,2,3,5,8). ALS has no
per-iteration hook, so each count is a separate `ALS.fit` from the same seed on the same cached
training DataFrame; ALS is deterministic for a seed, so the model after n iterations of a fit with
maxIter = n is the one a longer fit passes through. Prints one JSON line per count:
{"iter": n, "t": seconds of the fit, "rmse": test RMSE}. Reading and caching the files is not
timed (like LIBMF's driver, whose reading is not timed either); the test RMSE is computed on
the test ratings whose user and item were seen in training (`coldStartStrategy="drop"`; the
count of those dropped is printed). Runs Spark in local mode with THREADS cores
(`local[THREADS]`), so THREADS worker threads and one JVM.
"""
import json
import sys
import time


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    train, test, rank, reg, iters, threads = sys.argv[1:]
    counts = [int(x) for x in iters.split(",")]
    from pyspark.ml.evaluation import RegressionEvaluator
    from pyspark.ml.recommendation import ALS
    from pyspark.sql import SparkSession
    from pyspark.sql.types import FloatType, IntegerType, StructField, StructType

    spark = (SparkSession.builder.master(f"local[{int(threads)}]").appName("harp-mfsgd-peer")
             .config("spark.driver.memory", "6g")
             .config("spark.sql.shuffle.partitions", str(4 * int(threads)))
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    schema = StructType([StructField("user", IntegerType()), StructField("item", IntegerType()),
                         StructField("rating", FloatType())])

    def load(path):
        df = spark.read.csv(path, sep=" ", schema=schema, mode="FAILFAST")
        df = df.repartition(4 * int(threads)).cache()
        return df, df.count()

    tr, ntr = load(train)
    te, nte = load(test)
    print(json.dumps({"train": ntr, "test": nte, "spark": spark.version}), flush=True)
    ev = RegressionEvaluator(metricName="rmse", labelCol="rating", predictionCol="prediction")
    for n in counts:
        als = ALS(rank=int(rank), maxIter=n, regParam=float(reg), userCol="user", itemCol="item",
                  ratingCol="rating", coldStartStrategy="drop", seed=7,
                  numUserBlocks=2 * int(threads), numItemBlocks=2 * int(threads))
        t0 = time.monotonic()
        model = als.fit(tr)
        # fit is lazy in part: materialise the factors inside the timed span
        model.userFactors.count()
        model.itemFactors.count()
        t = time.monotonic() - t0
        pred = model.transform(te).cache()
        kept = pred.count()
        rmse = ev.evaluate(pred)
        pred.unpersist()
        print(json.dumps({"iter": n, "t": round(t, 3), "rmse": round(rmse, 6),
                          "test_dropped": nte - kept}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
