package indent_test

import (
	"fmt"
	"strings"

	"github.com/tenaz/tenaz/pkg/indent"
)

func ExampleJSON() {
	fmt.Printf("%s\n", indent.JSON([]byte(`{"order_id":"o-1","lines":[1,2]}`)))
	deep := strings.Repeat("[", 2000) + strings.Repeat("]", 2000)
	fmt.Println(string(indent.JSON([]byte(deep))) == deep) // megabytes once indented: left as it is
	// Output:
	// {
	//   "order_id": "o-1",
	//   "lines": [
	//     1,
	//     2
	//   ]
	// }
	// true
}
