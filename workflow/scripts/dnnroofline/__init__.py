"""dnn-roofline: pure logic for the DNN training roofline study.

The entry scripts in ``workflow/scripts`` are thin wrappers around this
package; everything here is free of Snakemake and testable directly.
"""

__version__ = "0.1.0"
