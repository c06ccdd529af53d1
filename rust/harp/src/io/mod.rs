//! Input for every application, Hadoop style: an input (a file or a directory of files) is
//! divided across workers like input splits, and each worker reads only its share.
//!
//! * [`split`]: the division. All files are concatenated and cut into nearly equal ranges, one
//!   per worker ([`split::share`], [`split::spread`]); explicit splits are [`ByteRange`]s (Hadoop
//!   `FileSplit`s).
//! * [`lines`]: text. A byte range owns every line that *starts* inside it (the first range of a
//!   file starts at 0), so the union over all ranges is every line once; lines are streamed in
//!   blocks of whole lines, and a parse error is reported with the file and its absolute line.
//!   A line running past the end of its range costs work linear in its length.
//! * [`records`]: fixed-size binary records. Ranges count records, not bytes.
//!
//! Parsing the lines or records is the application's (e.g. `apps::kmeans::input`).

pub mod lines;
pub mod records;
pub mod split;

pub use lines::{read_lines, LineError};
pub use records::{check_records, read_records, RecordError};
pub use split::{share, spread, ByteRange};
