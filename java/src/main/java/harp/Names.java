package harp;

import java.util.function.Function;

/**
 * The names shared with the engine: every enum that crosses the native boundary (element types,
 * combiners, algorithms, error kinds) travels as the engine's name for it, never as a number.
 */
final class Names {
  private Names() {}

  /** The constant of {@code values} whose name is {@code name}. */
  static <E extends Enum<E>> E parse(E[] values, Function<E, String> nameOf, String name, String what) {
    for (E e : values) {
      if (nameOf.apply(e).equals(name)) {
        return e;
      }
    }
    throw new HarpException(HarpException.Kind.JAVA, "unknown " + what + " '" + name + "'");
  }
}
