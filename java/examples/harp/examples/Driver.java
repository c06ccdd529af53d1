package harp.examples;

import org.apache.hadoop.util.ProgramDriver;

/** Entry point of the examples jar: {@code hadoop jar harp-rs-examples.jar kmeans …}. */
public final class Driver {
  private Driver() {}

  public static void main(String[] args) throws Throwable {
    ProgramDriver pd = new ProgramDriver();
    pd.addClass("kmeans", harp.examples.kmeans.KMeans.class, "K-means clustering with allreduce (Map-Collective)");
    pd.addClass("wordcount", harp.examples.wordcount.WordCount.class, "word count with a key-value table and regroup (Map-Collective)");
    pd.addClass("pagerank", harp.examples.engine.EngineJob.PageRank.class, "PageRank on graph tables (the engine's harp pagerank)");
    pd.addClass("lda", harp.examples.engine.EngineJob.Lda.class, "latent Dirichlet allocation, Gibbs sampling with model rotation (the engine's harp lda)");
    pd.addClass("mds", harp.examples.engine.EngineJob.Mds.class, "multidimensional scaling, WDA-SMACOF (the engine's harp mds)");
    pd.addClass("layout", harp.examples.engine.EngineJob.Layout.class, "force-directed graph layout (the engine's harp layout)");
    pd.addClass("components", harp.examples.engine.EngineJob.Components.class, "connected components over events (the engine's harp components)");
    pd.addClass("id3", harp.examples.engine.EngineJob.Id3.class, "an ID3 decision tree over events (the engine's harp id3)");
    pd.addClass("mfsgd", harp.examples.engine.EngineJob.Mfsgd.class, "matrix factorisation by SGD with model rotation (the engine's harp mfsgd)");
    pd.addClass("nbody", harp.examples.engine.EngineJob.Nbody.class, "N-body, positions gathered each step (the engine's harp nbody; no input)");
    pd.addClass("cg", harp.examples.engine.EngineJob.Cg.class, "conjugate gradient on a sparse SPD system, --grid or --input (the engine's harp cg)");
    pd.addClass("bench", harp.examples.bench.Bench.class, "time allreduce/broadcast through the Java API");
    System.exit(pd.run(args));
  }
}
