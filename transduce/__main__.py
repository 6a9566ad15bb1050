import sys

from transduce.cli import main

sys.exit(main())
