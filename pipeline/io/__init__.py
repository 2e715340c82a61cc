"""The only layer that touches files. Nothing here computes a verdict or imports upward.

| module | job |
|---|---|
| `locations` | what an input or output location names (a local path today) |
| `inputs` | finding the files of an input spec; describing and checksumming them |
| `csv_reader` | CSV in batches with exact row numbers |
| `readers` | reading files (Parquet and CSV) in batches or whole; footer statistics |
| `footer_stats` | integer columns' largest values from a Parquet footer's own bytes |
| `manifest` | the run manifest, and whether a directory is provably a snim-batch output |
| `commit` | staging and the atomic commit of the output directory; writing Parquet |
| `scratch` | scratch files for splitting large long-form inputs |
"""
